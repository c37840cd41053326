//! Decode fusion, in one place: every rule that records two or more
//! kernels as one dispatch with the same bits, listed in [`RULES`] (the
//! names `sharpi --unfuse` takes), each in a file of this module with the
//! preconditions it checks.
//!
//! The op files (`op_*.rs`) record plain kernels, each tagged with its op
//! (`cmd.rs`'s `Op`). When a submission is recorded into a command buffer,
//! the fusion pass (`pass.rs`) walks its whole plain list and, at each
//! command, tries its rules in order: a rule that matches reads ahead for
//! the rest of its pattern and gives the fused kernel that stands in the
//! first command's place (the norm's quantization, [`Rule::NormQuant`];
//! the add and the norm, [`Rule::AddNorm`], [`Rule::NormAdd`]; the gated
//! unit's quantization, [`Rule::GluQuant`]; the RoPE's cache write,
//! [`Rule::RopeKv`]; the per-head norm with its RoPE, scale and cache
//! write, [`Rule::NormRope`] and the two after it; the merge of Q, K and
//! V, [`Rule::Qkv`]). The replay key holds the plain list and the
//! switches, so a replayed step runs no pass.
//!
//! The fused-matvec family ([`Rule::Matvec`] to [`Rule::MatvecKv`],
//! [`Rule::Ffn`], [`Rule::Oproj`]) is still asked by the op files while
//! they record: `window.rs`'s `Window` shows the recorded commands (the
//! last one, or the latest of the last `LOOK_BACK` to touch a binding)
//! and a rule that matches records the fused kernel in place of the ones
//! it replaces. A norm before a product becomes the product's prologue
//! ([`Rule::Matvec`]; not a norm that [`Rule::AddNorm`] will take), so
//! that the product's add ([`Rule::MatvecAdd`]), its RoPE and cache write
//! ([`Rule::MatvecRope`], [`Rule::MatvecKv`]) and the merge of Q, K and V
//! find it; the feed-forward block ([`Rule::Ffn`]) and the output
//! projection ([`Rule::Oproj`]) then take whole fused products.
//!
//! Every rule states its preconditions on types, shapes, adjacency and
//! buffer overlap where it is defined. A rule turned off ([`Unfused`])
//! leaves the plain kernels, or the smaller fusions, to run as they were
//! recorded; the results are the same bits.
//!
//! Faults that act on a plain kernel (`missing-barrier`,
//! `gpu-act-f16-truncate`, `gpu-post-norm-add`, `gpu-softmax-unshifted`)
//! keep the rules that would replace it from running.

mod ffn;
mod list;
mod matvec;
mod matvec_rope;
mod norm;
mod norm_rope;
mod oproj;
mod pass;
mod qkv;
mod quant;
mod rope_kv;
mod unfused;
mod window;

use list::overlaps;
pub(super) use matvec::{matvec, subgroups_supported, NormPrologue};
pub(super) use pass::run as pass;
pub use unfused::Unfused;

use super::{Bind, VulkanBackend};
use crate::ops::{Act, GluKind, KvType};
use crate::vulkan::push::RopePush;
use crate::vulkan::Shader;

// The op files' questions, one per op: whether a rule takes the op into
// what was recorded before it (the rule then recorded the fused kernel).
// The order within each is the order the rules are tried in.

/// `x += y`: into the fused product that wrote `y` (then that product
/// into the feed-forward block or the attention before it), or into the
/// product and post-norm before it.
pub(super) fn add(b: &mut VulkanBackend, x: Act, y: Act) -> bool {
    if matvec::add_into_matvec(b, x, y) {
        // A feed-forward block's down projection: with its gate / up /
        // unit; an attention's output projection: into the attention.
        if !ffn::ffn_into_matvecs(b) {
            oproj::oproj_into_attention(b);
        }
        return true;
    }
    matvec::post_norm_into_matvec(b, x, y)
}

/// The gated unit `x = glu(x, y)`: into the two products that wrote them.
pub(super) fn glu(b: &mut VulkanBackend, kind: GluKind, x: Act, y: Act) -> bool {
    matvec::glu_into_matvecs(b, kind, x, y)
}

/// The RoPE `p` of `x`: into the normed product that wrote `x`.
pub(super) fn rope(b: &mut VulkanBackend, x: Act, p: &RopePush) -> bool {
    matvec_rope::rope_into_matvec(b, x, p)
}

/// The cache write of `src` (`width` elements a row into `dst`, a cache
/// of `ty`, at the position in inbox word `pos_at`): into the normed
/// product that wrote `src`.
pub(super) fn kv_write(
    b: &mut VulkanBackend,
    src: Act,
    width: usize,
    dst: &Bind,
    ty: KvType,
    pos_at: u32,
) -> bool {
    matvec_rope::kv_into_matvec(b, src, width, dst.clone(), ty, pos_at)
}

/// A decode fusion rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `add` then the RMS norm of the sum: `rms_norm.comp` ADD.
    AddNorm,
    /// A post-norm in place then the residual add of its output:
    /// `rms_norm.comp` ADD_TO.
    NormAdd,
    /// An RMS norm then the quantization of its output: `rms_norm.comp`
    /// QUANT.
    NormQuant,
    /// A gated unit then the quantization of its output: `glu_quant.comp`.
    GluQuant,
    /// A RoPE then the cache write of its rows: `rope.comp` KV_WRITE.
    RopeKv,
    /// A per-head norm then the RoPE of its heads: `norm_rope.comp`.
    NormRope,
    /// The query's scale after a fused norm and RoPE: its `has_scale`.
    NormRopeScale,
    /// The cache write after a fused norm and RoPE: its `kv`.
    NormRopeKv,
    /// One row's product with the norm (or quantization) before it as its
    /// prologue: `matvec.comp` PRO_*.
    Matvec,
    /// A fused product then the residual add of its output: EPI_ADD.
    MatvecAdd,
    /// A fused product, a post-norm of its output and the residual add:
    /// EPI_POST_NORM.
    MatvecPostNorm,
    /// Two fused products of one normed row then their gated unit:
    /// PAIR_GLU.
    MatvecGlu,
    /// A normed product then the RoPE of its output: EPI_ROPE.
    MatvecRope,
    /// A normed product (rotated or not) then the cache write of its
    /// output: EPI_ROPE's cache write.
    MatvecKv,
    /// Two or three normed products of one row (Q, K, V): MULTI, merged
    /// at submission.
    Qkv,
    /// The fused gate / up / unit then the down projection with its add:
    /// `ffn_decode.comp`.
    Ffn,
    /// Decode attention then the output projection with its add:
    /// `attention.comp` OUT_PROJ.
    Oproj,
}

/// A rule's entry in [`RULES`]: its `--unfuse` name and the file that
/// holds it.
pub struct RuleInfo {
    pub rule: Rule,
    pub name: &'static str,
    pub file: &'static str,
}

/// Every decode fusion rule, in the order a decode step meets them.
pub const RULES: [RuleInfo; 17] = [
    info(Rule::AddNorm, "add-norm", "norm.rs"),
    info(Rule::NormAdd, "norm-add", "norm.rs"),
    info(Rule::NormQuant, "norm-quant", "quant.rs"),
    info(Rule::GluQuant, "glu-quant", "quant.rs"),
    info(Rule::RopeKv, "rope-kv", "rope_kv.rs"),
    info(Rule::NormRope, "norm-rope", "norm_rope.rs"),
    info(Rule::NormRopeScale, "norm-rope-scale", "norm_rope.rs"),
    info(Rule::NormRopeKv, "norm-rope-kv", "norm_rope.rs"),
    info(Rule::Matvec, "matvec", "matvec.rs"),
    info(Rule::MatvecAdd, "matvec-add", "matvec.rs"),
    info(Rule::MatvecPostNorm, "matvec-post-norm", "matvec.rs"),
    info(Rule::MatvecGlu, "matvec-glu", "matvec.rs"),
    info(Rule::MatvecRope, "matvec-rope", "matvec_rope.rs"),
    info(Rule::MatvecKv, "matvec-kv", "matvec_rope.rs"),
    info(Rule::Qkv, "qkv", "qkv.rs"),
    info(Rule::Ffn, "ffn", "ffn.rs"),
    info(Rule::Oproj, "oproj", "oproj.rs"),
];

const fn info(rule: Rule, name: &'static str, file: &'static str) -> RuleInfo {
    RuleInfo { rule, name, file }
}

impl Rule {
    /// Its `--unfuse` name.
    pub fn name(self) -> &'static str {
        RULES[self as usize].name
    }
}

/// What the rules keep between the ops of a submission.
#[derive(Default)]
pub(super) struct State {
    /// The rules turned off.
    pub off: Unfused,
    /// The norm the last fused matvec computed (`matvec.rs`).
    pub norm_prologue: Option<NormPrologue>,
    /// The block terms of the feed-forward block and of the attention's
    /// output projection (`ffn.rs`): slot and bytes.
    pub ffn_partials: Option<(u32, u64)>,
    /// The post-norm epilogue's counter word (`matvec.rs`), made with the
    /// backend.
    pub post_counter: Option<u32>,
}

/// A fused kernel to record in place of the last command: its shader,
/// bindings and push bytes (the workgroups are the replaced command's
/// where the rule says so).
pub(super) struct Fused {
    pub shader: &'static Shader,
    pub binds: Vec<Bind>,
    pub push: Vec<u8>,
}

/// Whether `rule` is on.
pub(super) fn on(b: &VulkanBackend, rule: Rule) -> bool {
    !b.fuse.off.is_off(rule)
}

/// Whether the rules of fused matvecs (those from [`Rule::Matvec`] on)
/// may run: `rule` on and no fault that acts on the kernels they replace
/// (the add before a norm, the standalone quantizers).
pub(super) fn allowed(b: &VulkanBackend, rule: Rule) -> bool {
    on(b, rule)
        && !crate::fault::active("missing-barrier")
        && !crate::fault::active("gpu-act-f16-truncate")
}

/// The counter word shared by the epilogues whose last workgroup finishes
/// the work (`matvec.rs` post-norm, `ffn.rs`, `oproj.rs`), or `None` with
/// the backend's error set.
pub(super) fn post_counter(b: &mut VulkanBackend) -> Option<Bind> {
    let slot = match b.fuse.post_counter {
        Some(slot) => slot,
        None => match b.new_buffer("matvec epilogue counter", 4, false, true) {
            Ok(slot) => {
                b.fuse.post_counter = Some(slot);
                slot
            }
            Err(e) => {
                let e = b.vk_err("matvec epilogue counter", 4, e);
                b.fail(e);
                return None;
            }
        },
    };
    Some(Bind {
        buf: slot,
        bytes: 0..4,
    })
}

/// Block terms: `bytes` of the backend's partials buffer, which this
/// block and the attention's output projection (`oproj.rs`)
/// share (made, or made larger, when one needs more; never filled: every
/// term is written before it is read).
pub(super) fn partials(b: &mut VulkanBackend, bytes: u64) -> Option<Bind> {
    let slot = match b.fuse.ffn_partials {
        Some((slot, have)) if have >= bytes => slot,
        _ => match b.new_buffer("feed-forward partials", bytes, false, false) {
            Ok(slot) => {
                b.fuse.ffn_partials = Some((slot, bytes));
                slot
            }
            Err(e) => {
                let e = b.vk_err("feed-forward partials", bytes, e);
                b.fail(e);
                return None;
            }
        },
    };
    Some(Bind {
        buf: slot,
        bytes: 0..bytes,
    })
}

/// The u32 at byte `at` of push bytes.
pub(super) fn read_u32(push: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(push[at..at + 4].try_into().expect("four bytes"))
}

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_list_is_in_the_enum_order_with_distinct_names_and_files() {
        for (i, r) in RULES.iter().enumerate() {
            assert_eq!(r.rule as usize, i, "{}", r.name);
            assert_eq!(r.rule.name(), r.name);
            let path = format!(
                "{}/src/vulkan/backend/fuse/{}",
                env!("CARGO_MANIFEST_DIR"),
                r.file
            );
            assert!(std::path::Path::new(&path).exists(), "{path}");
        }
        let mut names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RULES.len());
    }
}
