//! The quantization of an activation row for the integer products, within
//! the kernel that wrote the row (`op_quantize.rs` records it plainly):
//!
//! - [`Rule::NormQuant`]: an RMS norm (with or without its residual add,
//!   [`Rule::AddNorm`]) then the quantization of its output becomes the
//!   norm's QUANT variant (`shaders/rms_norm.comp`), which also writes the
//!   blocks. Preconditions: the norm is the last command, with its
//!   weight, wrote exactly `x` from elements it does not overwrite, in
//!   groups of whole 32-element blocks of at most [`MAX_FUSED_QUANT_GROUP`]
//!   elements; the format is Q8_0 or Q8_1.
//! - [`Rule::GluQuant`]: a gated unit (SwiGLU, GeGLU) then the
//!   quantization of its output becomes `shaders/glu_quant.comp`.
//!   Preconditions: the unit is the last command and wrote exactly `x`,
//!   whole 32-element blocks; Q8_0 or Q8_1.
//!
//! One dispatch and one barrier fewer before every product that follows a
//! norm or a unit; the same bits. With fault `gpu-act-f16-truncate`, the
//! fused kernels' variants whose f16 scale is truncated.

use super::window::Window;
use super::{on, read_u32, Fused, Rule};
use super::{Bind, VulkanBackend};
use crate::fault;
use crate::ggml_type::GgmlType;
use crate::ops::Act;
use crate::vulkan::push::{is_glu, RmsNormPush, FUSED_NORM_PUSH, MAX_FUSED_QUANT_GROUP};
use crate::vulkan::{shaders, BinaryPush, Shader};

// glu_quant.comp: BinaryPush, then the first word of the quantized blocks.
const _: () = {
    let size = std::mem::size_of::<BinaryPush>() + 4;
    assert!(size == shaders::GLU_Q8_0.push_constant_size as usize);
    assert!(size == shaders::GLU_Q8_1.push_constant_size as usize);
};

/// [`Rule::NormQuant`]'s pattern: the fused norm that also writes `x`
/// (`fmt`) into `bind` from word `word0`, with the norm's workgroups.
pub(super) fn norm_quant(
    win: Window,
    x: &Bind,
    fmt: GgmlType,
    bind: &Bind,
    word0: u32,
    trunc: bool,
) -> Option<(Fused, [u32; 3])> {
    let norm = win.last()?;
    let with_add = norm.shader.index == shaders::ADD_RMS_NORM_W.index;
    if !with_add && norm.shader.index != shaders::RMS_NORM_W.index {
        return None;
    }
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
    if *dst != *x
        || super::overlaps(src, dst)
        || !group.is_multiple_of(32)
        || group > MAX_FUSED_QUANT_GROUP
    {
        return None;
    }
    binds.insert(3, bind.clone());
    let q_at = std::mem::size_of::<RmsNormPush>();
    let mut push = norm.push.to_vec();
    push.resize(FUSED_NORM_PUSH, 0);
    push[q_at..q_at + 4].copy_from_slice(&word0.to_le_bytes());
    Some((
        Fused {
            shader: fused,
            binds,
            push,
        },
        norm.groups,
    ))
}

/// Records the quantization of `x` into `bind` (from word `word0`) within
/// the RMS norm recorded last ([`Rule::NormQuant`]). Returns whether it
/// did.
pub(in super::super) fn quant_into_norm(
    b: &mut VulkanBackend,
    x: Act,
    fmt: GgmlType,
    bind: &Bind,
    word0: u32,
) -> bool {
    if !on(b, Rule::NormQuant) {
        return false;
    }
    let trunc = fault::active("gpu-act-f16-truncate");
    let Some((f, groups)) = norm_quant(b.window(), &Bind::act(x), fmt, bind, word0, trunc) else {
        return false;
    };
    b.drop_last(1);
    b.dispatch_bytes(f.shader, &f.binds, f.push, groups);
    true
}

/// [`Rule::GluQuant`]'s pattern: the fused unit that also writes `x`
/// (`elems` elements, `fmt`) into `bind` from word `word0`.
pub(super) fn glu_quant(
    win: Window,
    x: &Bind,
    elems: usize,
    fmt: GgmlType,
    bind: &Bind,
    word0: u32,
    trunc: bool,
) -> Option<Fused> {
    let glu = win.last()?;
    if !is_glu(glu.shader, glu.push) {
        return None;
    }
    let fused = match fmt {
        GgmlType::Q8_0 => fault_variant(&shaders::GLU_Q8_0, trunc),
        GgmlType::Q8_1 => fault_variant(&shaders::GLU_Q8_1, trunc),
        _ => return None,
    };
    // Bindings: a, b, out.
    if glu.access[2].bind() != *x || !elems.is_multiple_of(32) {
        return None;
    }
    let binds: Vec<Bind> = glu.binds().into_iter().chain([bind.clone()]).collect();
    let mut push = glu.push.to_vec();
    push.extend_from_slice(&word0.to_le_bytes());
    Some(Fused {
        shader: fused,
        binds,
        push,
    })
}

/// Records the quantization of `x` into `bind` (from word `word0`) within
/// the gated unit recorded last ([`Rule::GluQuant`]). Returns whether it
/// did.
pub(in super::super) fn quant_into_glu(
    b: &mut VulkanBackend,
    x: Act,
    fmt: GgmlType,
    bind: &Bind,
    word0: u32,
) -> bool {
    if !on(b, Rule::GluQuant) {
        return false;
    }
    let trunc = fault::active("gpu-act-f16-truncate");
    let Some(f) = glu_quant(b.window(), &Bind::act(x), x.len(), fmt, bind, word0, trunc) else {
        return false;
    };
    b.drop_last(1);
    // Eight invocations per block of 32, four results each.
    let groups = b.groups_1d(f.shader, x.len() as u64 / 4);
    b.dispatch_bytes(f.shader, &f.binds, f.push, groups);
    true
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
mod tests {
    use super::super::test_support::{bind, dispatch};
    use super::*;
    use crate::ops::{BinaryOp, GluKind};
    use crate::vulkan::push::binary_code;
    use crate::vulkan::PushConstants;

    fn norm(x: &Bind, out: &Bind, group: u32) -> super::super::test_support::Cmd {
        let push = RmsNormPush {
            n_groups: 1,
            group,
            ..RmsNormPush::default()
        };
        let w = bind(9, 0, 4 * u64::from(group));
        dispatch(
            &shaders::RMS_NORM_W,
            &[x.clone(), out.clone(), w],
            push.as_bytes(),
        )
    }

    #[test]
    fn norm_quant_takes_the_norm_that_wrote_the_row() {
        let (x, xn, q) = (bind(3, 0, 256), bind(4, 0, 256), bind(5, 0, 72));
        let cmds = [norm(&x, &xn, 64)];
        let w = Window { cmds: &cmds };
        let (f, _) = norm_quant(w, &xn, GgmlType::Q8_0, &q, 7, false).unwrap();
        assert_eq!(f.shader.index, shaders::RMS_NORM_W_Q8_0.index);
        assert_eq!(f.binds[3], q);
        assert_eq!(read_u32(&f.push, 20), 7);
        // Q8_K; another row; a norm in place; a group of no whole blocks
        // or over the shared-memory limit.
        assert!(norm_quant(w, &xn, GgmlType::Q8_K, &q, 7, false).is_none());
        assert!(norm_quant(w, &x, GgmlType::Q8_0, &q, 7, false).is_none());
        let cmds = [norm(&x, &x, 64)];
        assert!(norm_quant(Window { cmds: &cmds }, &x, GgmlType::Q8_0, &q, 0, false).is_none());
        for group in [48, 4096] {
            let big = bind(4, 0, 4 * u64::from(group));
            let cmds = [norm(&bind(3, 0, 4 * u64::from(group)), &big, group)];
            let w = Window { cmds: &cmds };
            assert!(norm_quant(w, &big, GgmlType::Q8_1, &q, 0, false).is_none());
        }
    }

    #[test]
    fn glu_quant_takes_the_gated_unit_that_wrote_the_row() {
        let (x, y, q) = (bind(3, 0, 256), bind(4, 0, 256), bind(5, 0, 72));
        let unit = |op: BinaryOp| {
            let push = BinaryPush {
                n: 64,
                op: binary_code(op),
                ..BinaryPush::default()
            };
            dispatch(
                &shaders::BINARY,
                &[x.clone(), y.clone(), x.clone()],
                push.as_bytes(),
            )
        };
        let cmds = [unit(BinaryOp::Glu(GluKind::SwiGlu))];
        let w = Window { cmds: &cmds };
        let f = glu_quant(w, &x, 64, GgmlType::Q8_1, &q, 0, false).unwrap();
        assert_eq!(
            (f.shader.index, f.binds.len()),
            (shaders::GLU_Q8_1.index, 4)
        );
        assert!(glu_quant(w, &x, 48, GgmlType::Q8_1, &q, 0, false).is_none());
        assert!(glu_quant(w, &y, 64, GgmlType::Q8_1, &q, 0, false).is_none());
        let cmds = [unit(BinaryOp::Add)];
        let w = Window { cmds: &cmds };
        assert!(glu_quant(w, &x, 64, GgmlType::Q8_1, &q, 0, false).is_none());
    }
}
