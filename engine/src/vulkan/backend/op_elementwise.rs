//! Elementwise ops, norms and RoPE on the device. The elementwise ops run
//! one shader per family, the op a push constant: [`binary`]
//! (`shaders/binary.comp`) and [`unary`] (`shaders/unary.comp`).

use super::{Bind, VulkanBackend};
use crate::fault;
use crate::ggml_type::GgmlType;
use crate::op_codes;
use crate::ops::{Act, BinaryOp, GluKind, RopeParams, RopeStyle, UnaryOp, Weight};
use crate::vulkan::{shaders, BinaryPush, PushConstants, Shader};

/// `UnaryPush` of `shaders/common/elementwise.glsl`: `x[offset + i] =
/// f(x[offset + i])` for `i < n`, `f` chosen by `op` (a `UNARY_*` code of
/// `shaders/unary.comp`; scale: `x * a`; softcap: `tanh(x * a) * b`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UnaryPush {
    pub n: u32,
    pub offset: u32,
    pub a: f32,
    pub b: f32,
    pub op: u32,
}

const _: () = assert!(std::mem::size_of::<UnaryPush>() == 20);
const _: () =
    assert!(std::mem::size_of::<UnaryPush>() == shaders::UNARY.push_constant_size as usize);

// SAFETY: repr(C), five 32-bit scalar fields, 20 bytes (asserted above): no padding.
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
// The fused variants (add and / or quantization): RmsNormPush, then the
// first word of the quantized blocks and the addend's element offset
// (`fuse_add_into_norm`, op_quantize.rs `fuse_into_norm`).
pub(super) const FUSED_NORM_PUSH: usize = std::mem::size_of::<RmsNormPush>() + 8;
/// The largest group a norm fused with its quantization takes (it keeps
/// the group's normed values in shared memory: `MAX_QUANT_GROUP` of
/// `shaders/rms_norm.comp`, 12 KiB of the 16 KiB every device has).
pub(super) const MAX_FUSED_QUANT_GROUP: u32 = 3072;
// glu_quant.comp: BinaryPush, then the first word of the quantized blocks.
const _: () = {
    let size = std::mem::size_of::<BinaryPush>() + 4;
    assert!(size == shaders::GLU_Q8_0.push_constant_size as usize);
    assert!(size == shaders::GLU_Q8_1.push_constant_size as usize);
};
const _: () = {
    assert!(FUSED_NORM_PUSH == shaders::RMS_NORM_W_Q8_0.push_constant_size as usize);
    assert!(FUSED_NORM_PUSH == shaders::RMS_NORM_W_ADD_TO.push_constant_size as usize);
    assert!(FUSED_NORM_PUSH == shaders::RMS_NORM_W_Q8_1.push_constant_size as usize);
    assert!(FUSED_NORM_PUSH == shaders::ADD_RMS_NORM_W.push_constant_size as usize);
    assert!(FUSED_NORM_PUSH == shaders::ADD_RMS_NORM_W_Q8_0.push_constant_size as usize);
    assert!(FUSED_NORM_PUSH == shaders::ADD_RMS_NORM_W_Q8_1.push_constant_size as usize);
};

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
    /// Where the first row's position is: word `pos_at` of the inbox
    /// (`shaders/common/step.glsl`).
    pub pos_at: u32,
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

/// `x = op(x, y)` through `shaders/binary.comp`, the op a push constant
/// (`BINARY_*` there; `x` is both `a` and `out`: each invocation reads and
/// writes its own element).
pub(super) fn binary(b: &mut VulkanBackend, op: BinaryOp, x: Act, y: Act) {
    same_shape(op.name(), x, y);
    if op == BinaryOp::Add
        && (super::op_matvec_fused::add_into_matvec(b, x, y) || norm_into_add(b, x, y))
    {
        return;
    }
    if let BinaryOp::Glu(kind) = op {
        if super::op_matvec_fused::glu_into_matvecs(b, kind, x, y) {
            return;
        }
    }
    let n = x.len() as u32;
    let push = BinaryPush {
        n,
        a_offset: offset(x),
        b_offset: offset(y),
        out_offset: offset(x),
        op: binary_code(op),
    };
    let groups = b.groups_1d(&shaders::BINARY, u64::from(n));
    b.dispatch(
        &shaders::BINARY,
        &[Bind::act(x), Bind::act(y), Bind::act(x)],
        &push,
        groups,
    );
}

/// Records `x += y` together with the RMS norm recorded last when that norm
/// was `y = rms_norm(y) · w` in place on exactly `y` and `x` is apart from
/// `y` (a post-norm: Gemma-3's after attention and after the FFN):
/// `shaders/rms_norm.comp`'s ADD_TO variant writes the normed `y` as the
/// norm did and adds it to `x` (one rounding, as `binary.comp`). One
/// dispatch and one barrier fewer, the same bits; the norm that follows the
/// add (the next one's input) then stands alone, where a fused matvec can
/// take it as its prologue. Not while fault `missing-barrier` is injected.
/// Returns whether it did.
fn norm_into_add(b: &mut VulkanBackend, x: Act, y: Act) -> bool {
    if fault::active("missing-barrier") {
        return false;
    }
    if super::op_matvec_fused::post_norm_into_matvec(b, x, y) {
        return true;
    }
    let Some(super::LastDispatch {
        shader,
        push: norm_push,
        access,
        groups,
    }) = b.last_dispatch()
    else {
        return false;
    };
    if shader.index != shaders::RMS_NORM_W.index {
        return false;
    }
    let (src, out, w) = (&access[0], &access[1], &access[2]);
    let (xb, yb) = (Bind::act(x), Bind::act(y));
    if src.buf != yb.buf
        || src.range != yb.bytes
        || out.buf != yb.buf
        || out.range != yb.bytes
        || overlap((xb.buf, &xb.bytes), (yb.buf, &yb.bytes))
    {
        return false;
    }
    let mut bytes = norm_push.to_vec();
    let wb = w.bind();
    bytes.extend_from_slice(&0u32.to_le_bytes()); // q_offset: no quantization
    bytes.extend_from_slice(&offset(x).to_le_bytes());
    #[cfg(feature = "fault-injection")]
    let shader = if fault::active("gpu-post-norm-add") {
        &shaders::RMS_NORM_W_ADD_TO_UNWEIGHTED
    } else {
        &shaders::RMS_NORM_W_ADD_TO
    };
    #[cfg(not(feature = "fault-injection"))]
    let shader = &shaders::RMS_NORM_W_ADD_TO;
    b.cmds.pop();
    b.dispatch_bytes(shader, &[yb.clone(), yb, wb, xb], bytes, groups);
    true
}

/// Whether two byte ranges of buffers share a byte.
fn overlap(a: (u32, &std::ops::Range<u64>), b: (u32, &std::ops::Range<u64>)) -> bool {
    a.0 == b.0 && a.1.start < b.1.end && b.1.start < a.1.end
}

/// The op's code in `shaders/binary.comp` (`BINARY_*`).
fn binary_code(op: BinaryOp) -> u32 {
    match op {
        BinaryOp::Add => op_codes::BINARY_ADD,
        BinaryOp::Mul => op_codes::BINARY_MUL,
        BinaryOp::Glu(GluKind::SwiGlu) => op_codes::BINARY_SWIGLU,
        BinaryOp::Glu(GluKind::GeGluTanh) => op_codes::BINARY_GEGLU,
    }
}

/// Whether a dispatch of `shader` with push-constant bytes `push` is a
/// gated unit (SwiGLU, GeGLU).
pub(super) fn is_glu(shader: &Shader, push: &[u8]) -> bool {
    let at = std::mem::offset_of!(BinaryPush, op);
    let code = push
        .get(at..at + 4)
        .map(|c| u32::from_ne_bytes(c.try_into().expect("four bytes")));
    shader.index == shaders::BINARY.index
        && [GluKind::SwiGlu, GluKind::GeGluTanh]
            .into_iter()
            .any(|k| code == Some(binary_code(BinaryOp::Glu(k))))
}

/// Whether a dispatch of `shader` with push-constant bytes `push` is an add
/// (the residual add before a norm, which fault `missing-barrier` targets).
pub(super) fn is_add(shader: &Shader, push: &[u8]) -> bool {
    let at = std::mem::offset_of!(BinaryPush, op);
    shader.index == shaders::BINARY.index
        && push.get(at..at + 4) == Some(&binary_code(BinaryOp::Add).to_ne_bytes()[..])
}

/// `x = op(x)` in place through `shaders/unary.comp`, the op and its
/// parameters push constants (`UNARY_*` there).
pub(super) fn unary(b: &mut VulkanBackend, op: UnaryOp, x: Act) {
    // The code of `UNARY_*` in the shader, and the parameters.
    if let UnaryOp::Scale(s) = op {
        if super::op_norm_rope::scale_into_norm_rope(b, x, s) {
            return;
        }
    }
    let (code, a, c) = match op {
        UnaryOp::Scale(s) => (op_codes::UNARY_SCALE, s, 0.0),
        // `1 / cap` rounded to f32 on the host, as the CPU does.
        UnaryOp::Softcap(cap) => (op_codes::UNARY_SOFTCAP, 1.0 / cap, cap),
    };
    let n = x.len() as u32;
    let push = UnaryPush {
        n,
        offset: offset(x),
        a,
        b: c,
        op: code,
    };
    let groups = b.groups_1d(&shaders::UNARY, u64::from(n));
    b.dispatch(&shaders::UNARY, &[Bind::act(x)], &push, groups);
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
    let w = w.map(|w| {
        let gw = b.weight(w);
        assert!(
            gw.ty == GgmlType::F32 && gw.n_in * gw.n_out == group && gw.chunks.len() == 1,
            "rms_norm: weight {} must be {group} f32 values in one chunk",
            gw.name
        );
        Bind::chunk(gw, &gw.chunks[0])
    });
    // One workgroup per group: ask groups_1d for n_groups workgroups' worth
    // of invocations (it may spill into y; the shader flattens the id).
    // Every variant of rms_norm.comp has the same workgroup size.
    let groups = b.groups_1d(
        &shaders::RMS_NORM,
        n_groups * u64::from(shaders::RMS_NORM.local_size[0]),
    );
    if let Some(w) = &w {
        if fuse_add_into_norm(b, x, w, out, &push, groups) {
            return;
        }
    }
    let shader = if w.is_some() {
        &shaders::RMS_NORM_W
    } else {
        &shaders::RMS_NORM
    };
    let binds: Vec<Bind> = [Bind::act(x), Bind::act(out)]
        .into_iter()
        .chain(w)
        .collect();
    b.dispatch(shader, &binds, &push, groups);
}

// The fused variants are dispatched with the plain norm's workgroup count.
const _: () = {
    let wg = shaders::RMS_NORM.local_size[0];
    assert!(wg == shaders::RMS_NORM_W.local_size[0]);
    assert!(wg == shaders::ADD_RMS_NORM_W.local_size[0]);
    assert!(wg == shaders::RMS_NORM_W_Q8_0.local_size[0]);
    assert!(wg == shaders::ADD_RMS_NORM_W_Q8_1.local_size[0]);
    assert!(wg == shaders::RMS_NORM_W_ADD_TO.local_size[0]);
};

/// Records `rms_norm(x, w) -> out` together with the residual add recorded
/// last, when that add was `x += y` in place on exactly `x` and `out`
/// overlaps neither: `shaders/rms_norm.comp`'s ADD variant (x = x + y, then
/// the norm of the sum) replaces it. One dispatch and one barrier fewer
/// after every residual add; the same bits. Not while fault
/// `missing-barrier` is injected (it drops the barrier between the two).
/// Returns whether it did.
fn fuse_add_into_norm(
    b: &mut VulkanBackend,
    x: Act,
    w: &Bind,
    out: Act,
    push: &RmsNormPush,
    groups: [u32; 3],
) -> bool {
    if fault::active("missing-barrier") {
        return false;
    }
    let Some(super::LastDispatch {
        shader,
        push: add_push,
        access,
        ..
    }) = b.last_dispatch()
    else {
        return false;
    };
    if !is_add(shader, add_push) {
        return false;
    }
    let (a, y, sum) = (&access[0], &access[1], &access[2]);
    let xb = Bind::act(x);
    let ob = Bind::act(out);
    let overlaps = |buf: u32, r: &std::ops::Range<u64>| overlap((ob.buf, &ob.bytes), (buf, r));
    if a.buf != xb.buf
        || a.range != xb.bytes
        || sum.buf != xb.buf
        || sum.range != xb.bytes
        || overlaps(xb.buf, &xb.bytes)
        || overlaps(y.buf, &y.range)
    {
        return false;
    }
    let at = std::mem::offset_of!(BinaryPush, b_offset);
    let y_offset = u32::from_le_bytes(add_push[at..at + 4].try_into().expect("four bytes"));
    let binds = [xb, ob, w.clone(), y.bind()];
    b.cmds.pop();
    let mut bytes = push.as_bytes().to_vec();
    bytes.extend_from_slice(&0u32.to_le_bytes()); // q_offset: no quantization
    bytes.extend_from_slice(&y_offset.to_le_bytes());
    b.dispatch_bytes(&shaders::ADD_RMS_NORM_W, &binds, bytes, groups);
    true
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
        pos_at: b
            .stage_u32(&[u32::try_from(pos0).expect("rope: position fits u32")])
            .1,
        neox: u32::from(p.style == RopeStyle::Neox),
        // The CPU's theta_scale, bit for bit (engine/src/cpu/rope.rs).
        theta_scale: p.base.powf(-2.0f32 / n_rot as f32),
        freq_scale: p.freq_scale,
    };
    if super::op_matvec_rope::rope_into_matvec(b, x, &push)
        || super::op_norm_rope::rope_into_norm(b, x, &push)
    {
        return;
    }
    let groups = b.groups_1d(&shaders::ROPE, u64::from(push.rows) * u64::from(half));
    let step = Bind::step(push.pos_at);
    b.dispatch(&shaders::ROPE, &[Bind::act(x), step], &push, groups);
}
