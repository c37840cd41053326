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
use super::{Cx, RoleMap, Scratch};
use crate::fault;
use crate::ops::{Act, BackendError, GluKind, Weight};

/// One layer's experts (shapes in ggml order).
pub struct MoeWeights {
    /// `[n_embd, n_expert]`
    router: Weight,
    /// `[n_embd, n_ff_exp, n_expert]`
    gate: Weight,
    /// `[n_embd, n_ff_exp, n_expert]`
    up: Weight,
    /// `[n_ff_exp, n_embd, n_expert]`
    down: Weight,
}

impl MoeWeights {
    pub fn new(t: &RoleMap<Weight>) -> MoeWeights {
        MoeWeights {
            router: t.get(Role::FfnGateInp),
            gate: t.get(Role::FfnGateExps),
            up: t.get(Role::FfnUpExps),
            down: t.get(Role::FfnDownExps),
        }
    }
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
    cx.matmul_id(w.up, p.n_expert, m.ids, xb, s.up);
    cx.tap("ffn_moe_up", s.up)?;
    cx.matmul_id(w.gate, p.n_expert, m.ids, xb, s.gate);
    cx.tap("ffn_moe_gate", s.gate)?;
    cx.glu(kind, s.gate, s.up);
    cx.tap(moe_glu_tap(kind), s.gate)?;
    cx.matmul_id(w.down, p.n_expert, m.ids, s.gate, m.experts);
    cx.tap("ffn_moe_down", m.experts)?;
    cx.mul_groups(m.experts, m.weights);
    cx.tap("ffn_moe_weighted", m.experts)?;
    cx.sum_groups(m.experts, out);
    cx.tap("ffn_moe_out", out)
}

fn moe_glu_tap(kind: GluKind) -> &'static str {
    match kind {
        GluKind::SwiGlu => "ffn_moe_swiglu",
        GluKind::GeGluTanh => "ffn_moe_geglu",
    }
}
