//! The decode fusion pass: a walk over a submission's plain command list
//! (what the op files recorded, each dispatch tagged with its [`Op`](super::super::cmd::Op)) per
//! stage of [`STAGES`], trying at each command the stage's rules in their
//! order; a rule that matches reads ahead of that command for the rest of
//! its pattern and gives the fused kernel that stands in its place, and
//! the commands after it that it takes in. Commands taken in are skipped
//! when the walk comes to them, and a rule reading ahead does not see
//! them (they were moved up into an earlier kernel). As ggml-vulkan's
//! graph fusion (`ggml_can_fuse` and its callers): the rules see the whole
//! step, not only what was recorded before an op.
//!
//! Each rule is a pure function of the list and a [`Ctx`] (the switches
//! and the device's workgroup limits), so that its unit tests need no
//! device.

use super::super::cmd::Cmd;
use super::super::VulkanBackend;
use super::list::{Ctx, Fusion, List};
use super::{norm, norm_rope, qkv, quant, rope_kv, Rule};

/// A rule of the pass: at command `i` of the list, the fused kernel and
/// the later commands it takes in, or `None`.
type RuleFn = fn(&List, usize, &Ctx) -> Option<Fusion>;

/// The rules of the pass, in stages: each stage is one walk over the list
/// the stage before it left, trying its rules in their order (that of
/// [`super::RULES`]) at each command. A later stage's rules take in the
/// kernels of an earlier one (the norm with its add, [`Rule::AddNorm`],
/// then its quantization, [`Rule::NormQuant`]). A rule whose pattern goes
/// on past its first match ([`Rule::NormRope`]: the scale and the cache
/// write after it) takes those too when their rules are on.
const STAGES: [&[(Rule, RuleFn)]; 2] = [
    &[
        (Rule::AddNorm, norm::add_norm),
        (Rule::NormAdd, norm::norm_add),
    ],
    &[
        (Rule::NormQuant, quant::norm_quant),
        (Rule::GluQuant, quant::glu_quant),
        (Rule::RopeKv, rope_kv::rope_kv),
        (Rule::NormRope, norm_rope::norm_rope),
        (Rule::Qkv, qkv::qkv),
    ],
];

/// `cmds` with the rules of [`STAGES`] applied, or `None` where none
/// matched.
pub(super) fn fuse(cmds: &[Cmd], ctx: &Ctx) -> Option<Vec<Cmd>> {
    let mut fused: Option<Vec<Cmd>> = None;
    for rules in STAGES {
        let now = fused.as_deref().unwrap_or(cmds);
        if let Some(next) = walk(now, rules, ctx) {
            fused = Some(next);
        }
    }
    fused
}

/// One walk of a stage's `rules` over `cmds`, or `None` where none
/// matched.
fn walk(cmds: &[Cmd], rules: &[(Rule, RuleFn)], ctx: &Ctx) -> Option<Vec<Cmd>> {
    let mut list = List::new(cmds);
    let mut out = Vec::with_capacity(cmds.len());
    let mut any = false;
    for (i, cmd) in cmds.iter().enumerate() {
        if list.taken(i) {
            continue;
        }
        let fused = rules
            .iter()
            .filter(|(rule, _)| ctx.on(*rule))
            .find_map(|(_, f)| f(&list, i, ctx));
        match fused {
            Some(f) => {
                for j in f.takes {
                    debug_assert!(j > i && !list.taken(j), "a rule takes in later commands");
                    list.take(j);
                }
                out.push(f.cmd);
                any = true;
            }
            None => out.push(cmd.clone()),
        }
    }
    any.then_some(out)
}

/// The pass over `b`'s plain list `cmds` with its switches, or `None`
/// where no rule matched (the list is recorded as it is).
pub(in super::super) fn run(b: &VulkanBackend, cmds: &[Cmd]) -> Option<Vec<Cmd>> {
    fuse(cmds, &Ctx::of(b))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{bind, parts, tagged, Op};
    use super::*;
    use crate::ggml_type::GgmlType;
    use crate::ops::BinaryOp;
    use crate::vulkan::push::{binary_code, BinaryPush, QuantizePush, RmsNormPush};
    use crate::vulkan::{shaders, PushConstants};

    /// `x += y`, `out = rms_norm(x) · w`, the quantization of `out`.
    fn chain() -> Vec<Cmd> {
        let (x, y, out, w, q) = (
            bind(3, 0, 256),
            bind(4, 0, 256),
            bind(5, 0, 256),
            bind(6, 0, 256),
            bind(7, 0, 72),
        );
        let add = BinaryPush {
            n: 64,
            op: binary_code(BinaryOp::Add),
            ..BinaryPush::default()
        };
        let norm = RmsNormPush {
            n_groups: 1,
            group: 64,
            ..RmsNormPush::default()
        };
        let quant = QuantizePush::default();
        let fmt = GgmlType::Q8_0;
        vec![
            tagged(
                Op::Add,
                &shaders::BINARY,
                &[x.clone(), y, x.clone()],
                add.as_bytes(),
            ),
            tagged(
                Op::RmsNorm(norm),
                &shaders::RMS_NORM_W,
                &[x, out.clone(), w],
                norm.as_bytes(),
            ),
            tagged(
                Op::Quantize { fmt, push: quant },
                &shaders::QUANTIZE_Q8_0,
                &[out, q],
                quant.as_bytes(),
            ),
        ]
    }

    fn shaders_of(cmds: &[Cmd]) -> Vec<&'static str> {
        cmds.iter().map(|c| parts(c).0.name).collect()
    }

    #[test]
    fn a_later_stage_takes_in_what_an_earlier_one_fused() {
        let cmds = chain();
        let fused = fuse(&cmds, &Ctx::for_tests()).expect("rules matched");
        assert_eq!(shaders_of(&fused), [shaders::ADD_RMS_NORM_W_Q8_0.name]);
        // add-norm off: the add, then the norm with its quantization.
        let mut ctx = Ctx::for_tests();
        ctx.off.set(Rule::AddNorm, true);
        let fused = fuse(&cmds, &ctx).expect("rules matched");
        let want = [shaders::BINARY.name, shaders::RMS_NORM_W_Q8_0.name];
        assert_eq!(shaders_of(&fused), want);
        // Both off: nothing matches, the list is recorded as it is.
        ctx.off.set(Rule::NormQuant, true);
        assert!(fuse(&cmds, &ctx).is_none());
    }
}
