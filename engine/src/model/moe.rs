//! A mixture-of-experts feed-forward over [`crate::ops::Ops`], as
//! llama.cpp's `build_moe_ffn` computes it with softmax gating:
//!
//! ```text
//! logits  = xb · Wrouterᵀ                       ffn_moe_logits  [n, n_expert]
//! probs   = softmax(logits)                     ffn_moe_probs
//! ids     = top-k(probs)                        ffn_moe_topk    [n, k]
//! w       = probs[ids]                          ffn_moe_weights [n, k]
//! w       = w / max(Σ w, 2^-14)  (if norm)      ffn_moe_weights_norm
//! up, gate = W{up,gate}[ids] · xb               ffn_moe_up, ffn_moe_gate  [n, k · n_ff_exp]
//! act     = glu(gate, up)                       ffn_moe_swiglu
//! y       = Wdown[ids] · act                    ffn_moe_down    [n, k · n_embd]
//! y_j    *= w_j                                 ffn_moe_weighted
//! out     = y_0 + y_1 + … + y_{k-1}             ffn_moe_out     [n, n_embd]
//! ```

use super::hparams::MoeParams;
use super::spec::Role;
pub use super::step::{ExpertRunner, ExpertWeights, Experts};
use super::{Cx, RoleMap, Scratch};
use crate::fault;
use crate::ops::{Act, BackendError, GluKind, Weight};

/// One layer's experts (shapes in ggml order).
pub struct MoeWeights {
    /// `[n_embd, n_expert]`
    router: Weight,
    /// The expert matrices where the layer runs; `None` when they stay on
    /// the host behind the layer's [`ExpertRunner`] (an expert slot
    /// cache).
    experts: Option<ExpertWeights>,
}

impl MoeWeights {
    pub fn new(t: &RoleMap<Weight>) -> MoeWeights {
        let e = [Role::FfnGateExps, Role::FfnUpExps, Role::FfnDownExps].map(|r| t.get_opt(r));
        MoeWeights {
            router: t.get(Role::FfnGateInp),
            experts: match e {
                [Some(gate), Some(up), Some(down)] => Some(ExpertWeights { gate, up, down }),
                _ => None,
            },
        }
    }
}

/// The expert products where the layer's experts live: up, gate, GLU,
/// down (tapping `ffn_moe_up`, `ffn_moe_gate`, the activation,
/// `ffn_moe_down`).
pub fn experts(cx: &mut Cx<'_, '_>, e: &Experts) -> Result<(), BackendError> {
    let w = e.w.expect("expert weights where the layer runs");
    cx.matmul_id(w.up, e.n_expert, e.ids, e.xb, e.up);
    cx.tap("ffn_moe_up", e.up)?;
    cx.matmul_id(w.gate, e.n_expert, e.ids, e.xb, e.gate);
    cx.tap("ffn_moe_gate", e.gate)?;
    cx.glu(e.kind, e.gate, e.up);
    cx.tap(moe_glu_tap(e.kind), e.gate)?;
    cx.matmul_id(w.down, e.n_expert, e.ids, e.gate, e.out);
    cx.tap("ffn_moe_down", e.out)
}

/// `out = moe(xb)` for `xb`, `out` `[n, n_embd]`.
pub fn run(
    cx: &mut Cx<'_, '_>,
    w: &MoeWeights,
    p: &MoeParams,
    kind: GluKind,
    xb: Act,
    s: &Scratch,
    out: Act,
) -> Result<(), BackendError> {
    let m = s.moe.as_ref().expect("MoE scratch for a MoE model");
    cx.matmul(w.router, xb, m.probs);
    cx.tap("ffn_moe_logits", m.probs)?;
    cx.softmax(m.probs);
    cx.tap("ffn_moe_probs", m.probs)?;
    cx.top_k(m.probs, m.ids, m.weights);
    cx.tap("ffn_moe_topk", m.ids)?;
    cx.tap("ffn_moe_weights", m.weights)?;
    if p.norm_weights {
        if !fault::active("moe-renorm") {
            cx.normalize_rows(m.weights);
        }
        cx.tap("ffn_moe_weights_norm", m.weights)?;
    }
    let e = Experts {
        w: w.experts,
        n_expert: p.n_expert,
        kind,
        ids: m.ids,
        xb,
        up: s.up,
        gate: s.gate,
        out: m.experts,
    };
    // By the layer's runner when it has one, else here.
    match cx.run_experts(&e) {
        Some(out) => out?,
        None => experts(cx, &e)?,
    }
    cx.mul_groups(m.experts, m.weights);
    cx.tap("ffn_moe_weighted", m.experts)?;
    cx.sum_groups(m.experts, out);
    cx.tap("ffn_moe_out", out)
}

pub(crate) fn moe_glu_tap(kind: GluKind) -> &'static str {
    match kind {
        GluKind::SwiGlu => "ffn_moe_swiglu",
        GluKind::GeGluTanh => "ffn_moe_geglu",
    }
}
