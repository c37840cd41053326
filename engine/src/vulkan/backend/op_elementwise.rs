//! Elementwise ops, norms and RoPE on the device. The elementwise ops run
//! one shader per family, the op a push constant: [`binary`]
//! (`shaders/binary.comp`) and [`unary`] (`shaders/unary.comp`).

use super::cmd::Op;
use super::fuse;
use super::{Bind, VulkanBackend};
use crate::ggml_type::GgmlType;
use crate::op_codes;
use crate::ops::{Act, BinaryOp, RopeParams, RopeStyle, UnaryOp, Weight};
use crate::vulkan::push::{binary_code, RmsNormPush, RopePush, UnaryPush};
use crate::vulkan::{shaders, BinaryPush, PushConstants};

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
    let fused = match op {
        BinaryOp::Add => fuse::add(b, x, y),
        BinaryOp::Glu(kind) => fuse::glu(b, kind, x, y),
        BinaryOp::Mul => false,
    };
    if fused {
        return;
    }
    let n = x.len() as u32;
    let push = BinaryPush {
        n,
        a_offset: offset(x),
        b_offset: offset(y),
        out_offset: offset(x),
        op: binary_code(op),
    };
    let tag = match op {
        BinaryOp::Add => Op::Add,
        BinaryOp::Glu(kind) => Op::Glu(kind),
        BinaryOp::Mul => Op::Other,
    };
    let groups = b.groups_1d(&shaders::BINARY, u64::from(n));
    b.dispatch_op(
        tag,
        &shaders::BINARY,
        &[Bind::act(x), Bind::act(y), Bind::act(x)],
        push.as_bytes().to_vec(),
        groups,
    );
}

/// `x = op(x)` in place through `shaders/unary.comp`, the op and its
/// parameters push constants (`UNARY_*` there).
pub(super) fn unary(b: &mut VulkanBackend, op: UnaryOp, x: Act) {
    // The code of `UNARY_*` in the shader, and the parameters.
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
    let tag = match op {
        UnaryOp::Scale(s) => Op::Scale(s),
        UnaryOp::Softcap(_) => Op::Other,
    };
    let groups = b.groups_1d(&shaders::UNARY, u64::from(n));
    b.dispatch_op(
        tag,
        &shaders::UNARY,
        &[Bind::act(x)],
        push.as_bytes().to_vec(),
        groups,
    );
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
    let (shader, tag) = if w.is_some() {
        (&shaders::RMS_NORM_W, Op::RmsNorm(push))
    } else {
        (&shaders::RMS_NORM, Op::Other)
    };
    let binds: Vec<Bind> = [Bind::act(x), Bind::act(out)]
        .into_iter()
        .chain(w)
        .collect();
    b.dispatch_op(tag, shader, &binds, push.as_bytes().to_vec(), groups);
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
    if fuse::rope(b, x, &push) {
        return;
    }
    let groups = b.groups_1d(&shaders::ROPE, u64::from(push.rows) * u64::from(half));
    let step = Bind::step(push.pos_at);
    let binds = [Bind::act(x), step];
    let bytes = push.as_bytes().to_vec();
    b.dispatch_op(Op::Rope(push), &shaders::ROPE, &binds, bytes, groups);
}
