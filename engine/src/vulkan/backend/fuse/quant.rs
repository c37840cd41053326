//! The quantization of an activation row for the integer products,
//! within the kernel that wrote the row (`op_quantize.rs` records it
//! plainly):
//!
//! - [`Rule::NormQuant`](super::Rule::NormQuant): an RMS norm (with or without its residual add,
//!   [`Rule::AddNorm`](super::Rule::AddNorm)) then the quantization of its output becomes the
//!   norm's QUANT variant (`shaders/rms_norm.comp`), which also writes the
//!   blocks. Preconditions: the quantization is the command right after
//!   the norm; the norm has its weight and wrote exactly the row quantized,
//!   from elements it does not overwrite, in groups of whole 32-element
//!   blocks of at most [`MAX_FUSED_QUANT_GROUP`] elements; the format is
//!   Q8_0 or Q8_1.
//! - [`Rule::GluQuant`](super::Rule::GluQuant): a gated unit (SwiGLU, GeGLU) then the
//!   quantization of its output becomes `shaders/glu_quant.comp`.
//!   Preconditions: the quantization is the command right after the unit
//!   and takes exactly the unit's output, whole 32-element blocks; Q8_0 or
//!   Q8_1.
//!
//! One dispatch and one barrier fewer before every product that follows a
//! norm or a unit; the same bits. With fault `gpu-act-f16-truncate`, the
//! fused kernels' variants whose f16 scale is truncated.

use super::super::cmd::{Cmd, Op};
use super::list::{Ctx, Fusion, List};
use super::{overlaps, read_u32};
use crate::fault;
use crate::ggml_type::GgmlType;
use crate::vulkan::push::{RmsNormPush, FUSED_NORM_PUSH, MAX_FUSED_QUANT_GROUP};
use crate::vulkan::{shaders, BinaryPush, Shader};

// glu_quant.comp: BinaryPush, then the first word of the quantized blocks.
const _: () = {
    let size = std::mem::size_of::<BinaryPush>() + 4;
    assert!(size == shaders::GLU_Q8_0.push_constant_size as usize);
    assert!(size == shaders::GLU_Q8_1.push_constant_size as usize);
};

/// The quantization right after command `i`: its format, the row it
/// reads, its blocks and their first word.
fn quantize_after(
    list: &List,
    i: usize,
) -> Option<(usize, GgmlType, super::Bind, super::Bind, u32)> {
    let j = list.next(i)?;
    let q = list.at(j)?;
    let Op::Quantize { fmt, push } = q.op else {
        return None;
    };
    // Bindings: x, blocks.
    Some((j, fmt, q.bind(0), q.bind(1), push.out_offset))
}

/// [`Rule::NormQuant`](super::Rule::NormQuant) at command `i`: the norm that also writes the
/// blocks of the quantization after it, with the norm's workgroups.
pub(super) fn norm_quant(list: &List, i: usize, _: &Ctx) -> Option<Fusion> {
    let norm = list.at(i)?;
    let with_add = norm.shader.index == shaders::ADD_RMS_NORM_W.index;
    if !with_add && !matches!(norm.op, Op::RmsNorm(_)) {
        return None;
    }
    let (j, fmt, x, bind, word0) = quantize_after(list, i)?;
    let trunc = fault::active("gpu-act-f16-truncate");
    let fused = match (fmt, with_add) {
        (GgmlType::Q8_0, false) => fault_variant(&shaders::RMS_NORM_W_Q8_0, trunc),
        (GgmlType::Q8_1, false) => fault_variant(&shaders::RMS_NORM_W_Q8_1, trunc),
        (GgmlType::Q8_0, true) => fault_variant(&shaders::ADD_RMS_NORM_W_Q8_0, trunc),
        (GgmlType::Q8_1, true) => fault_variant(&shaders::ADD_RMS_NORM_W_Q8_1, trunc),
        _ => return None,
    };
    let group = read_u32(norm.push, std::mem::offset_of!(RmsNormPush, group));
    // Bindings x, out, w, then the quantized blocks (and the addend last).
    let mut binds = norm.binds();
    let (src, dst) = (&binds[0], &binds[1]);
    if *dst != x || overlaps(src, dst) || !group.is_multiple_of(32) || group > MAX_FUSED_QUANT_GROUP
    {
        return None;
    }
    binds.insert(3, bind);
    let q_at = std::mem::size_of::<RmsNormPush>();
    let mut push = norm.push.to_vec();
    push.resize(FUSED_NORM_PUSH, 0);
    push[q_at..q_at + 4].copy_from_slice(&word0.to_le_bytes());
    Some(Fusion {
        cmd: Cmd::dispatch(Op::Other, fused, &binds, push, norm.groups),
        takes: vec![j],
    })
}

/// [`Rule::GluQuant`](super::Rule::GluQuant) at command `i`: the unit that also writes the
/// blocks of the quantization after it.
pub(super) fn glu_quant(list: &List, i: usize, ctx: &Ctx) -> Option<Fusion> {
    let glu = list.at(i)?;
    let Op::Glu(_) = glu.op else {
        return None;
    };
    let (j, fmt, x, bind, word0) = quantize_after(list, i)?;
    let trunc = fault::active("gpu-act-f16-truncate");
    let fused = match fmt {
        GgmlType::Q8_0 => fault_variant(&shaders::GLU_Q8_0, trunc),
        GgmlType::Q8_1 => fault_variant(&shaders::GLU_Q8_1, trunc),
        _ => return None,
    };
    let elems = (x.bytes.end - x.bytes.start) / 4;
    // Bindings: a, b, out.
    if glu.bind(2) != x || !elems.is_multiple_of(32) {
        return None;
    }
    let binds: Vec<super::Bind> = glu.binds().into_iter().chain([bind]).collect();
    let mut push = glu.push.to_vec();
    push.extend_from_slice(&word0.to_le_bytes());
    // Eight invocations per block of 32, four results each.
    let groups = ctx.groups_1d(fused, elems / 4)?;
    Some(Fusion {
        cmd: Cmd::dispatch(Op::Other, fused, &binds, push, groups),
        takes: vec![j],
    })
}

/// The fused kernel `s`, or its variant whose f16 scale is truncated (fault
/// `gpu-act-f16-truncate`).
#[cfg(feature = "fault-injection")]
fn fault_variant(s: &'static Shader, trunc: bool) -> &'static Shader {
    match (trunc, s.index) {
        (true, i) if i == shaders::RMS_NORM_W_Q8_0.index => &shaders::RMS_NORM_W_Q8_0_F16TRUNC,
        (true, i) if i == shaders::RMS_NORM_W_Q8_1.index => &shaders::RMS_NORM_W_Q8_1_F16TRUNC,
        (true, i) if i == shaders::ADD_RMS_NORM_W_Q8_0.index => {
            &shaders::ADD_RMS_NORM_W_Q8_0_F16TRUNC
        }
        (true, i) if i == shaders::ADD_RMS_NORM_W_Q8_1.index => {
            &shaders::ADD_RMS_NORM_W_Q8_1_F16TRUNC
        }
        (true, i) if i == shaders::GLU_Q8_0.index => &shaders::GLU_Q8_0_F16TRUNC,
        (true, i) if i == shaders::GLU_Q8_1.index => &shaders::GLU_Q8_1_F16TRUNC,
        _ => s,
    }
}

#[cfg(not(feature = "fault-injection"))]
fn fault_variant(s: &'static Shader, _trunc: bool) -> &'static Shader {
    s
}

#[cfg(test)]
#[path = "quant_tests.rs"]
mod tests;
