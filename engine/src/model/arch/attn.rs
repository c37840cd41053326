//! The self-attention half of a pre-norm block, as llama and Qwen 3 run it
//! (Qwen 3 adds per-head RMS QK-norm before RoPE).

use super::{attn_params, rope_params};
use crate::model::spec::Role;
use crate::model::{Cx, LayerDesc, Model, RoleMap, Scratch};
use crate::ops::{BackendError, Kv, Weight};

/// One block's attention weights (shapes in ggml order `[n_in, n_out]`).
pub struct AttnWeights {
    /// `[n_embd]`
    pub norm: Weight,
    /// `[n_embd, n_head · head_dim]`
    wq: Weight,
    /// `[n_embd, n_kv_head · head_dim]`
    wk: Weight,
    /// `[n_embd, n_kv_head · head_dim]`
    wv: Weight,
    /// `[head_dim]` each, when the architecture norms Q and K per head.
    qk_norm: Option<(Weight, Weight)>,
    /// `[n_head · head_dim, n_embd]`
    wo: Weight,
}

impl AttnWeights {
    pub fn new(t: &RoleMap<Weight>, qk_norm: bool) -> AttnWeights {
        AttnWeights {
            norm: t.get(Role::AttnNorm),
            wq: t.get(Role::AttnQ),
            wk: t.get(Role::AttnK),
            wv: t.get(Role::AttnV),
            qk_norm: qk_norm.then(|| (t.get(Role::AttnQNorm), t.get(Role::AttnKNorm))),
            wo: t.get(Role::AttnOut),
        }
    }
}

/// `s.proj = attention(rms_norm(x) · norm) · Woᵀ` for the rows of `x`
/// (positions `pos0..`), K/V into `kv`. Taps `attn_norm`, `Qcur_normed` /
/// `Kcur_normed` (with QK-norm), `Qcur`, `Kcur`, `Vcur`, `kqv_out`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    cx: &mut Cx<'_, '_>,
    m: &Model,
    ld: &LayerDesc,
    w: &AttnWeights,
    x: crate::ops::Act,
    s: &Scratch,
    kv: Kv,
    pos0: usize,
) -> Result<(), BackendError> {
    let hp = m.hparams();
    let (eps, d, hd) = (hp.rms_eps, hp.n_embd, hp.head_dim_k);
    cx.rms_norm(x, Some(w.norm), eps, d, s.xb);
    cx.tap("attn_norm", s.xb)?;
    cx.matmul(w.wq, s.xb, s.q);
    cx.matmul(w.wk, s.xb, s.k);
    cx.matmul(w.wv, s.xb, s.v);
    if let Some((qn, kn)) = w.qk_norm {
        cx.rms_norm(s.q, Some(qn), eps, hd, s.q);
        cx.tap("Qcur_normed", s.q)?;
        cx.rms_norm(s.k, Some(kn), eps, hd, s.k);
        cx.tap("Kcur_normed", s.k)?;
    }
    let rope = rope_params(m.spec(), hp, ld);
    cx.rope(s.q, &rope, pos0);
    cx.rope(s.k, &rope, pos0);
    cx.tap("Qcur", s.q)?;
    cx.tap("Kcur", s.k)?;
    cx.tap("Vcur", s.v)?;
    cx.attention(kv, s.q, s.k, s.v, s.att, pos0, &attn_params(hp, ld));
    cx.tap("kqv_out", s.att)?;
    cx.matmul(w.wo, s.att, s.proj);
    Ok(())
}
