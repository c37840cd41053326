//! Elementwise ops, norms and RoPE on the device.

use super::{Bind, VulkanBackend};
use crate::ggml_type::GgmlType;
use crate::ops::{Act, GluKind, RopeParams, RopeStyle, Weight};
use crate::vulkan::{shaders, BinaryPush, PushConstants, Shader};

/// `UnaryPush` of `shaders/common/elementwise.glsl`: `x[offset + i] =
/// f(x[offset + i])` for `i < n` (scale: `x * a`; softcap: `tanh(x * a) * b`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UnaryPush {
    pub n: u32,
    pub offset: u32,
    pub a: f32,
    pub b: f32,
}

const _: () = assert!(std::mem::size_of::<UnaryPush>() == 16);
const _: () =
    assert!(std::mem::size_of::<UnaryPush>() == shaders::SCALE.push_constant_size as usize);
const _: () =
    assert!(std::mem::size_of::<UnaryPush>() == shaders::SOFTCAP.push_constant_size as usize);

// SAFETY: repr(C), four 32-bit scalar fields, 16 bytes (asserted above): no padding.
unsafe impl PushConstants for UnaryPush {}

/// `RmsNormPush` of `shaders/common/elementwise.glsl`: `n_groups` contiguous
/// groups of `group` elements from `x_offset` (read) and `out_offset` (written).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RmsNormPush {
    pub n_groups: u32,
    pub group: u32,
    pub x_offset: u32,
    pub out_offset: u32,
    pub eps: f32,
}

const _: () = assert!(std::mem::size_of::<RmsNormPush>() == 20);
const _: () =
    assert!(std::mem::size_of::<RmsNormPush>() == shaders::RMS_NORM.push_constant_size as usize);
const _: () =
    assert!(std::mem::size_of::<RmsNormPush>() == shaders::RMS_NORM_W.push_constant_size as usize);

// SAFETY: repr(C), five 32-bit scalar fields, 20 bytes (asserted above): no padding.
unsafe impl PushConstants for RmsNormPush {}

/// `RopePush` of `shaders/common/elementwise.glsl`: RoPE in place of `rows`
/// rows of `width` elements from `offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RopePush {
    pub rows: u32,
    pub width: u32,
    pub head_dim: u32,
    pub half_rot: u32,
    pub offset: u32,
    pub pos0: u32,
    /// 1 for [`RopeStyle::Neox`], 0 for [`RopeStyle::Norm`].
    pub neox: u32,
    /// `base^(-2 / n_rot)`, as the CPU computes it (f32 `powf`).
    pub theta_scale: f32,
    pub freq_scale: f32,
}

const _: () = assert!(std::mem::size_of::<RopePush>() == 36);
const _: () = assert!(std::mem::size_of::<RopePush>() == shaders::ROPE.push_constant_size as usize);

// SAFETY: repr(C), nine 32-bit scalar fields, 36 bytes (asserted above): no padding.
unsafe impl PushConstants for RopePush {}

/// An element offset as the shaders take it.
fn offset(a: Act) -> u32 {
    u32::try_from(a.elems().start).expect("activation offsets fit u32")
}

fn same_shape(op: &str, x: Act, y: Act) {
    assert!(
        x.rows() == y.rows() && x.width() == y.width(),
        "{op}: shapes {x:?} and {y:?} differ"
    );
}

/// `x += y`, through `shaders/add.comp` (out = a + b, elementwise; `x` is
/// both an input and the output: each invocation reads and writes its own
/// element).
pub(super) fn add(b: &mut VulkanBackend, x: Act, y: Act) {
    same_shape("add", x, y);
    let n = x.len() as u32;
    let push = BinaryPush {
        n,
        a_offset: x.elems().start as u32,
        b_offset: y.elems().start as u32,
        out_offset: x.elems().start as u32,
    };
    let groups = b.groups_1d(&shaders::ADD, u64::from(n));
    b.dispatch(
        &shaders::ADD,
        &[Bind::act(x), Bind::act(y), Bind::act(x)],
        &push,
        groups,
    );
}

/// `out = a OP b` elementwise through a [`BinaryPush`] shader (`x` is
/// both `a` and `out`: each invocation reads and writes its own element).
fn binary(b: &mut VulkanBackend, shader: &'static Shader, x: Act, y: Act) {
    let n = x.len() as u32;
    let push = BinaryPush {
        n,
        a_offset: offset(x),
        b_offset: offset(y),
        out_offset: offset(x),
    };
    let groups = b.groups_1d(shader, u64::from(n));
    b.dispatch(
        shader,
        &[Bind::act(x), Bind::act(y), Bind::act(x)],
        &push,
        groups,
    );
}

/// `x *= y`, through `shaders/mul.comp`.
pub(super) fn mul(b: &mut VulkanBackend, x: Act, y: Act) {
    same_shape("mul", x, y);
    binary(b, &shaders::MUL, x, y);
}

/// `x = f(x)` in place through a [`UnaryPush`] shader.
fn unary(b: &mut VulkanBackend, shader: &'static Shader, x: Act, a: f32, c: f32) {
    let n = x.len() as u32;
    let push = UnaryPush {
        n,
        offset: offset(x),
        a,
        b: c,
    };
    let groups = b.groups_1d(shader, u64::from(n));
    b.dispatch(shader, &[Bind::act(x)], &push, groups);
}

/// `x *= s`, through `shaders/unary.comp` (`OP_SCALE`).
pub(super) fn scale(b: &mut VulkanBackend, x: Act, s: f32) {
    unary(b, &shaders::SCALE, x, s, 0.0);
}

/// `x = cap · tanh(x / cap)`, through `shaders/unary.comp` (`OP_SOFTCAP`),
/// with `1 / cap` rounded to f32 on the host as the CPU does.
pub(super) fn softcap(b: &mut VulkanBackend, x: Act, cap: f32) {
    unary(b, &shaders::SOFTCAP, x, 1.0 / cap, cap);
}

/// `gate = act(gate) * up`, through `shaders/glu.comp`.
pub(super) fn glu(b: &mut VulkanBackend, kind: GluKind, gate: Act, up: Act) {
    same_shape("glu", gate, up);
    let shader = match kind {
        GluKind::SwiGlu => &shaders::GLU_SWIGLU,
        GluKind::GeGluTanh => &shaders::GLU_GEGLU,
    };
    binary(b, shader, gate, up);
}

/// RMS norm of each `group` of each row of `x` into `out` (maybe `x`),
/// through `shaders/rms_norm.comp`: one workgroup per group.
pub(super) fn rms_norm(
    b: &mut VulkanBackend,
    x: Act,
    w: Option<Weight>,
    eps: f32,
    group: usize,
    out: Act,
) {
    same_shape("rms_norm", x, out);
    assert!(
        group > 0 && x.width().is_multiple_of(group),
        "rms_norm: width {} in groups of {group}",
        x.width()
    );
    let n_groups = (x.len() / group) as u64;
    let push = RmsNormPush {
        n_groups: n_groups as u32,
        group: group as u32,
        x_offset: offset(x),
        out_offset: offset(out),
        eps,
    };
    let mut binds = vec![Bind::act(x), Bind::act(out)];
    let shader = match w {
        None => &shaders::RMS_NORM,
        Some(w) => {
            let gw = b.weight(w);
            assert!(
                gw.ty == GgmlType::F32 && gw.n_in * gw.n_out == group && gw.chunks.len() == 1,
                "rms_norm: weight {} must be {group} f32 values in one chunk",
                gw.name
            );
            binds.push(Bind::chunk(gw, &gw.chunks[0]));
            &shaders::RMS_NORM_W
        }
    };
    // One workgroup per group: ask groups_1d for n_groups workgroups' worth
    // of invocations (it may spill into y; the shader flattens the id).
    let groups = b.groups_1d(shader, n_groups * u64::from(shader.local_size[0]));
    b.dispatch(shader, &binds, &push, groups);
}

/// RoPE in place, through `shaders/rope.comp`.
pub(super) fn rope(b: &mut VulkanBackend, x: Act, p: &RopeParams, pos0: usize) {
    let (hd, n_rot) = (p.head_dim, p.n_rot);
    assert!(
        hd > 0 && x.width().is_multiple_of(hd) && n_rot % 2 == 0 && n_rot <= hd,
        "rope: width {}, head_dim {hd}, n_rot {n_rot}",
        x.width()
    );
    if n_rot == 0 {
        return;
    }
    let half = (n_rot / 2) as u32;
    let push = RopePush {
        rows: x.rows() as u32,
        width: x.width() as u32,
        head_dim: hd as u32,
        half_rot: half,
        offset: offset(x),
        pos0: u32::try_from(pos0).expect("rope: position fits u32"),
        neox: u32::from(p.style == RopeStyle::Neox),
        // The CPU's theta_scale, bit for bit (engine/src/cpu/rope.rs).
        theta_scale: p.base.powf(-2.0f32 / n_rot as f32),
        freq_scale: p.freq_scale,
    };
    let groups = b.groups_1d(&shaders::ROPE, u64::from(push.rows) * u64::from(half));
    b.dispatch(&shaders::ROPE, &[Bind::act(x)], &push, groups);
}
