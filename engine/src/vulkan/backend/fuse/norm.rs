//! The residual add and the RMS norm, either way round, as one
//! `shaders/rms_norm.comp` dispatch:
//!
//! - [`Rule::AddNorm`]: `x += y` then `out = rms_norm(x) · w` (a pre-norm
//!   layer's next norm) becomes the ADD variant (x = x + y, then the norm
//!   of the sum). Preconditions: the norm is the command right after the
//!   add; the add is in place on exactly the norm's input `x`; the norm has
//!   its weight; `out` overlaps neither `x` nor `y`.
//! - [`Rule::NormAdd`]: `y = rms_norm(y) · w` in place then `x += y` (a
//!   post-norm, Gemma 3's after attention and after the FFN) becomes the
//!   ADD_TO variant, which writes the normed `y` as the norm did and adds
//!   it to `x` (one rounding, as `binary.comp`). Preconditions: the add is
//!   the command right after the norm; the norm has its weight and is in
//!   place on exactly `y`; `x` is apart from `y`.
//!
//! One dispatch and one barrier fewer each, the same bits. Neither while
//! fault `missing-barrier` is injected (it drops the barrier between the
//! add and the norm). Both run in the pass's first stage, before the
//! rules that take a norm in (`quant.rs`'s [`Rule::NormQuant`] takes the
//! ADD variant too).

use super::super::cmd::{Cmd, Op};
use super::list::{Ctx, Fusion, List};
use super::{overlaps, Rule};
use crate::fault;
use crate::vulkan::push::BinaryPush;
use crate::vulkan::{shaders, PushConstants};

// The fused variants are dispatched with the plain norm's workgroup count.
const _: () = {
    let wg = shaders::RMS_NORM.local_size[0];
    assert!(wg == shaders::RMS_NORM_W.local_size[0]);
    assert!(wg == shaders::ADD_RMS_NORM_W.local_size[0]);
    assert!(wg == shaders::RMS_NORM_W_Q8_0.local_size[0]);
    assert!(wg == shaders::ADD_RMS_NORM_W_Q8_1.local_size[0]);
    assert!(wg == shaders::RMS_NORM_W_ADD_TO.local_size[0]);
};

/// [`Rule::AddNorm`]'s pattern on the add at `i` and the command after it,
/// `j`: the fused kernel, with the norm's workgroups.
fn add_norm_at(list: &List, i: usize, j: usize) -> Option<Cmd> {
    let (add, norm) = (list.at(i)?, list.at(j)?);
    let (Op::Add, Op::RmsNorm(p)) = (add.op, norm.op) else {
        return None;
    };
    // Add bindings: a, b, out; norm: x, out, w.
    let (a, y, sum) = (add.bind(0), add.bind(1), add.bind(2));
    let (x, out, w) = (norm.bind(0), norm.bind(1), norm.bind(2));
    if a != x || sum != x || overlaps(&out, &x) || overlaps(&out, &y) {
        return None;
    }
    let y_offset = super::read_u32(add.push, std::mem::offset_of!(BinaryPush, b_offset));
    let mut push = p.as_bytes().to_vec();
    push.extend_from_slice(&0u32.to_le_bytes()); // q_offset: no quantization
    push.extend_from_slice(&y_offset.to_le_bytes());
    let binds = [x, out, w, y];
    Some(Cmd::dispatch(
        Op::Other,
        &shaders::ADD_RMS_NORM_W,
        &binds,
        push,
        norm.groups,
    ))
}

/// [`Rule::AddNorm`] at command `i`.
pub(super) fn add_norm(list: &List, i: usize, ctx: &Ctx) -> Option<Fusion> {
    if !ctx.on(Rule::AddNorm) || fault::active("missing-barrier") {
        return None;
    }
    let j = list.next(i)?;
    let cmd = add_norm_at(list, i, j)?;
    Some(Fusion {
        cmd,
        takes: vec![j],
    })
}

/// Whether [`Rule::AddNorm`] takes the norm `cmds[j]` into the add before
/// it (`cmds[j - 1]`): a recorded norm the fused matvecs of `matvec.rs`
/// leave alone, as the pass would take it first.
pub(in super::super) fn add_norm_takes(cmds: &[Cmd], j: usize, ctx: &Ctx) -> bool {
    if j == 0 || !ctx.on(Rule::AddNorm) || fault::active("missing-barrier") {
        return false;
    }
    add_norm_at(&List::new(cmds), j - 1, j).is_some()
}

/// [`Rule::NormAdd`] at command `i`.
pub(super) fn norm_add(list: &List, i: usize, ctx: &Ctx) -> Option<Fusion> {
    if !ctx.on(Rule::NormAdd) || fault::active("missing-barrier") {
        return None;
    }
    let norm = list.at(i)?;
    let Op::RmsNorm(_) = norm.op else {
        return None;
    };
    let j = list.next(i)?;
    let add = list.at(j)?;
    let Op::Add = add.op else {
        return None;
    };
    // Norm bindings: x, out, w; add: a, b, out.
    let (src, y, nw) = (norm.bind(0), norm.bind(1), norm.bind(2));
    let x = add.bind(0);
    if src != y || add.bind(1) != y || add.bind(2) != x || overlaps(&x, &y) {
        return None;
    }
    let x_offset = super::read_u32(add.push, std::mem::offset_of!(BinaryPush, a_offset));
    let mut push = norm.push.to_vec();
    push.extend_from_slice(&0u32.to_le_bytes()); // q_offset: no quantization
    push.extend_from_slice(&x_offset.to_le_bytes());
    #[cfg(feature = "fault-injection")]
    let shader = if fault::active("gpu-post-norm-add") {
        &shaders::RMS_NORM_W_ADD_TO_UNWEIGHTED
    } else {
        &shaders::RMS_NORM_W_ADD_TO
    };
    #[cfg(not(feature = "fault-injection"))]
    let shader = &shaders::RMS_NORM_W_ADD_TO;
    let binds = [y.clone(), y, nw, x];
    Some(Fusion {
        cmd: Cmd::dispatch(Op::Other, shader, &binds, push, norm.groups),
        takes: vec![j],
    })
}

#[cfg(test)]
#[path = "norm_tests.rs"]
mod tests;
