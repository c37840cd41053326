//! Decode attention with the output projection after it and the
//! projection's residual add in one dispatch (`shaders/attention.comp`
//! OUT_PROJ, `by_type::ATTENTION_*_OPROJ`): where a one-row attention
//! dispatch (plain or split-K) is followed at once by the fused projection
//! of its output with the add (`Kind::QuantAdd`, a 32-element block type
//! with Q8_0 or Q8_1 activations), the projection becomes the attention's
//! epilogue, one dependent stage fewer per layer, with the same bits
//! (tests: `engine/tests/vulkan_attention_oproj.rs`). A peephole at the
//! add, like the other matvec fusions.
//!
//! Each head's writer (with split-K, the head's last run) writes its
//! blocks' terms of every projected row to the partials buffer it shares
//! with `ffn.rs`; the head that finishes last sums them (the
//! shader's docs). Not while fault `gpu-softmax-unshifted` is injected
//! (it swaps the attention kernel, which then runs as before). Fault
//! `gpu-oproj-residual`: the add goes into the projection's output
//! instead of the residual.

use super::super::hazard::Access;
use super::matvec::{kind_of, Kind};
use super::window::Window;
use super::{allowed, overlaps, partials, post_counter, read_u32, Fused, Rule};
use super::{Bind, VulkanBackend};
use crate::fault;
use crate::vulkan::push::{AttnPush, FusedPush, MatvecFusedPush, OprojPush, WeightPush};
use crate::vulkan::{shaders, PushConstants, Shader};

/// The epilogue variant of attention shader `s` for weight-type index
/// `t`, and whether it is split-K; `None` for other shaders and types.
fn variant(s: &Shader, t: usize) -> Option<(&'static Shader, bool)> {
    use shaders::by_type as ty;
    let (family, split) = [
        (&shaders::ATTENTION_F32, ty::ATTENTION_F32_OPROJ, false),
        (&shaders::ATTENTION_F16, ty::ATTENTION_F16_OPROJ, false),
        (
            &shaders::ATTENTION_F32_SPLIT,
            ty::ATTENTION_F32_SPLIT_OPROJ,
            true,
        ),
        (
            &shaders::ATTENTION_F16_SPLIT,
            ty::ATTENTION_F16_SPLIT_OPROJ,
            true,
        ),
    ]
    .into_iter()
    .find(|(plain, _, _)| plain.index == s.index)
    .map(|(_, family, split)| (family, split))?;
    Some((family.get(t).copied().flatten()?, split))
}

/// [`Rule::Oproj`]'s pattern on the last two commands in `win`: a
/// one-row decode attention (plain or split-K) then the fused projection
/// of exactly its output with the add (`QuantAdd`, a type with the
/// epilogue), heads of whole 32-element blocks, one chunk of all the
/// rows; the projection's output and the residual apart from each other,
/// from everything the attention touches and from the weight. Gives the
/// kernel with its bindings before the partials and the counter, the
/// partials' bytes, and the attention's workgroups.
pub(super) fn oproj(win: Window) -> Option<(Fused, u64, [u32; 3])> {
    let (att, mv) = (win.back(1)?, win.last()?);
    let Some((Kind::QuantAdd, t)) = kind_of(mv.shader) else {
        return None;
    };
    let (shader, split) = variant(att.shader, t)?;
    let a = |at: usize| read_u32(att.push, at);
    let n_head = a(std::mem::offset_of!(AttnPush, n_head));
    let dv = a(std::mem::offset_of!(AttnPush, head_dim_v));
    let n_rows = a(std::mem::offset_of!(AttnPush, n_rows));
    let att_out_offset = a(std::mem::offset_of!(AttnPush, out_offset));
    let w_at = std::mem::offset_of!(MatvecFusedPush, w);
    let f_at = std::mem::offset_of!(MatvecFusedPush, f);
    let mw = |at: usize| read_u32(mv.push, w_at + at);
    let mf = |at: usize| read_u32(mv.push, f_at + at);
    let rows = mw(std::mem::offset_of!(WeightPush, rows));
    // Attention bindings: q, K, V, out, step (split-K: q, K, V, the
    // partials, step, out). Projection: weight, input, out, residual.
    let ab: Vec<Bind> = att.access.iter().map(Access::bind).collect();
    let pb: Vec<Bind> = mv.access.iter().map(Access::bind).collect();
    let att_out = if split { &ab[5] } else { &ab[3] };
    let fits = n_rows == 1
        && dv > 0
        && dv.is_multiple_of(32)
        && mw(std::mem::offset_of!(WeightPush, n_in)) == n_head * dv
        && mw(std::mem::offset_of!(WeightPush, col0)) == 0
        && rows == mw(std::mem::offset_of!(WeightPush, n_out));
    let reads_out =
        pb[1] == *att_out && mf(std::mem::offset_of!(FusedPush, src_offset)) == att_out_offset;
    // The projection's output and the residual apart from each other and
    // from everything the attention touches and the weight.
    let (out, res) = (&pb[2], &pb[3]);
    let apart = !overlaps(out, res)
        && ab
            .iter()
            .chain([&pb[0]])
            .all(|x| !overlaps(x, out) && !overlaps(x, res));
    if !fits || !reads_out || !apart {
        return None;
    }
    let part_bytes = u64::from(n_head * dv / 32) * u64::from(rows) * 4;
    let mut push = att.push.to_vec();
    let oproj = OprojPush {
        row_bytes: mw(std::mem::offset_of!(WeightPush, row_bytes)),
        rows,
        out_offset: mw(std::mem::offset_of!(WeightPush, out_offset)),
        res_offset: mf(std::mem::offset_of!(FusedPush, res_offset)),
    };
    let mut binds = ab;
    binds.extend([pb[0].clone(), pb[2].clone(), pb[3].clone()]);
    let oproj = if fault::active("gpu-oproj-residual") {
        // The add goes into the projection's own output, whose binding
        // stands where the residual's does.
        let last = binds.len() - 1;
        binds[last] = pb[2].clone();
        OprojPush {
            res_offset: oproj.out_offset,
            ..oproj
        }
    } else {
        oproj
    };
    push.extend_from_slice(oproj.as_bytes());
    let fused = Fused {
        shader,
        binds,
        push,
    };
    Some((fused, part_bytes, att.groups))
}

/// Records the attention dispatch and the output projection with its add
/// recorded right after it as one dispatch, when [`oproj`] matches them
/// (see the module docs). Called right after the add fused into the
/// projection. Returns whether it did.
pub(in super::super) fn oproj_into_attention(b: &mut VulkanBackend) -> bool {
    if !allowed(b, Rule::Oproj) {
        return false;
    }
    let Some((f, part_bytes, groups)) = oproj(b.window()) else {
        return false;
    };
    b.drop_last(2);
    // After the two are taken off: making a buffer may record its fill.
    let (Some(part), Some(cnt)) = (partials(b, part_bytes), post_counter(b)) else {
        return true; // the backend's error is set
    };
    let mut binds = f.binds;
    binds.extend([part, cnt]);
    b.dispatch_bytes(f.shader, &binds, f.push, groups);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epilogue_variants_are_those_of_the_decode_attention_kernels() {
        let (plain, split) = (&shaders::ATTENTION_F32, &shaders::ATTENTION_F16_SPLIT);
        let t = (0..shaders::by_type::ATTENTION_F32_OPROJ.len())
            .find(|&t| variant(plain, t).is_some())
            .expect("a type with the epilogue");
        assert!(!variant(plain, t).unwrap().1);
        assert!(variant(split, t).unwrap().1);
        assert!(variant(&shaders::ATTENTION_F32_ROWS, t).is_none());
        assert!(variant(&shaders::RMS_NORM_W, t).is_none());
    }

    #[test]
    fn oproj_takes_the_projection_of_a_one_row_attention_output() {
        use super::super::matvec::family;
        use super::super::test_support::{bind, dispatch, Cmd};
        use crate::ggml_type::{weight_index, GgmlType};
        let t = weight_index(GgmlType::Q4_1).unwrap();
        let (out, x) = (bind(13, 0, 256), bind(10, 0, 256));
        let attention = |n_rows: u32, dv: u32| {
            let p = AttnPush {
                n_head: 2,
                head_dim_k: dv,
                head_dim_v: dv,
                n_rows,
                ..AttnPush::default()
            };
            let binds = [
                bind(11, 0, 256),
                bind(20, 0, 4096),
                bind(21, 0, 4096),
                out.clone(),
                bind(2, 0, 4),
            ];
            dispatch(&shaders::ATTENTION_F32, &binds, p.as_bytes())
        };
        let projection = |input: &Bind, res: &Bind, n_in: u32| {
            let p = MatvecFusedPush {
                w: WeightPush {
                    n_in,
                    rows: 64,
                    n_out: 64,
                    ..WeightPush::default()
                },
                ..MatvecFusedPush::default()
            };
            let binds = [
                bind(22, 0, 4096),
                input.clone(),
                bind(14, 0, 256),
                res.clone(),
            ];
            dispatch(
                family(Kind::QuantAdd, false)[t].unwrap(),
                &binds,
                p.as_bytes(),
            )
        };
        let cmds = [attention(1, 32), projection(&out, &x, 64)];
        let (f, part_bytes, _) = oproj(Window { cmds: &cmds }).expect("matches");
        assert_eq!(
            f.shader.index,
            variant(&shaders::ATTENTION_F32, t).unwrap().0.index
        );
        // The attention's five, then the weight, output and residual.
        assert_eq!((f.binds.len(), &f.binds[7]), (8, &x));
        assert_eq!(part_bytes, 2 * 64 * 4);
        let no = |cmds: &[Cmd]| oproj(Window { cmds }).is_none();
        // Two query rows; heads of no whole blocks; a projection of
        // another row or of another width; a residual over the attention's
        // input; no attention before it.
        assert!(no(&[attention(2, 32), projection(&out, &x, 64)]));
        assert!(no(&[attention(1, 16), projection(&out, &x, 32)]));
        assert!(no(&[
            attention(1, 32),
            projection(&x, &bind(15, 0, 256), 64)
        ]));
        assert!(no(&[attention(1, 32), projection(&out, &x, 32)]));
        assert!(no(&[
            attention(1, 32),
            projection(&out, &bind(11, 0, 256), 64)
        ]));
        assert!(no(&[projection(&out, &x, 64), projection(&out, &x, 64)]));
    }
}
