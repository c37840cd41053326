//! Gemma 3 (text). llama.cpp: src/models/gemma3.cpp.
//!
//! ```text
//! x = embed(tokens) · sqrt(n_embd)
//! per layer:
//!   xb = rms_norm(x) · attn_norm
//!   q, k, v = xb·Wqᵀ, xb·Wkᵀ, xb·Wvᵀ
//!   q, k = rms_norm_per_head(q) · q_norm, rms_norm_per_head(k) · k_norm
//!   q, k = rope_neox(q), rope_neox(k)      (local layers: base freq_base_swa)
//!   a = attention(q, k, v)·Woᵀ              (local layers: sliding window)
//!   x += rms_norm(a) · post_attention_norm
//!   xb = rms_norm(x) · ffn_norm
//!   f = (gelu_tanh(xb·Wgateᵀ) ⊙ xb·Wupᵀ)·Wdownᵀ
//!   x += rms_norm(f) · post_ffw_norm
//! logits = (rms_norm(x) · output_norm)·Woutᵀ   (soft-capped if the file says)
//! ```
//! The norm weights are used as stored (the converter folded Gemma's `1 +
//! w` into them; see [`crate::model::spec::GEMMA3`]).

use super::{attn_params, rope_params};
use crate::model::spec::Role;
use crate::model::{head, HeadOut, Model, RoleMap, Step};
use crate::ops::{BackendError, Kv, Weight};
use crate::placement::Stage;

/// One block's weights (shapes in ggml order `[n_in, n_out]`).
pub struct Layer {
    /// `[n_embd]`
    attn_norm: Weight,
    /// `[n_embd, n_head · head_dim]`
    wq: Weight,
    /// `[n_embd, n_kv_head · head_dim]`
    wk: Weight,
    /// `[n_embd, n_kv_head · head_dim]`
    wv: Weight,
    /// `[head_dim]`
    q_norm: Weight,
    /// `[head_dim]`
    k_norm: Weight,
    /// `[n_head · head_dim, n_embd]`
    wo: Weight,
    /// `[n_embd]`
    attn_post_norm: Weight,
    /// `[n_embd]`
    ffn_norm: Weight,
    /// `[n_embd, n_ff]`
    ffn_gate: Weight,
    /// `[n_embd, n_ff]`
    ffn_up: Weight,
    /// `[n_ff, n_embd]`
    ffn_down: Weight,
    /// `[n_embd]`
    ffn_post_norm: Weight,
}

pub struct Weights {
    /// `[n_embd, n_vocab]`, on the embedding's device.
    tok_embd: Weight,
    /// `[n_embd]`
    output_norm: Weight,
    /// `[n_embd, n_vocab]` (token_embd again when tied), on the head's device.
    output: Weight,
    layers: Vec<Layer>,
}

impl Weights {
    pub fn new(global: &RoleMap<Weight>, layers: &[RoleMap<Weight>]) -> Weights {
        Weights {
            tok_embd: global.get(Role::TokEmbd),
            output_norm: global.get(Role::OutputNorm),
            output: global.get(Role::Output),
            layers: layers
                .iter()
                .map(|t| Layer {
                    attn_norm: t.get(Role::AttnNorm),
                    wq: t.get(Role::AttnQ),
                    wk: t.get(Role::AttnK),
                    wv: t.get(Role::AttnV),
                    q_norm: t.get(Role::AttnQNorm),
                    k_norm: t.get(Role::AttnKNorm),
                    wo: t.get(Role::AttnOut),
                    attn_post_norm: t.get(Role::AttnPostNorm),
                    ffn_norm: t.get(Role::FfnNorm),
                    ffn_gate: t.get(Role::FfnGate),
                    ffn_up: t.get(Role::FfnUp),
                    ffn_down: t.get(Role::FfnDown),
                    ffn_post_norm: t.get(Role::FfnPostNorm),
                })
                .collect(),
        }
    }
}

/// The forward pass of `tokens` at positions `pos0..pos0 + n`.
pub fn forward(
    m: &Model,
    w: &Weights,
    step: &mut Step<'_>,
    kv: &[Kv],
    tokens: &[u32],
    pos0: usize,
    out: HeadOut<'_>,
) -> Result<(), BackendError> {
    let hp = m.hparams();
    let (n, eps, d, hd) = (tokens.len(), hp.rms_eps, hp.n_embd, hp.head_dim_k);

    // x: [n, n_embd], the residual stream.
    let mut x = step.hidden(Stage::Embed, n);
    {
        let mut cx = step.at(Stage::Embed);
        cx.embed(w.tok_embd, tokens, x);
        if let Some(s) = hp.embed_scale {
            cx.scale(x, s);
        }
        cx.tap("inp_scaled", x)?;
    }

    for (l, (lw, ld)) in w.layers.iter().zip(m.layers()).enumerate() {
        let stage = Stage::Layer(l);
        x = step.handoff(x, stage)?;
        // xb [n, n_embd], q [n, n_head·hd], k/v [n, n_kv_head·hd], att [n, n_head·hd],
        // proj [n, n_embd], gate/up [n, n_ff]
        let s = step.scratch(stage, n);
        let mut cx = step.at(stage);

        // Self-attention.
        cx.rms_norm(x, Some(lw.attn_norm), eps, d, s.xb);
        cx.tap("attn_norm", s.xb)?;
        cx.matmul(lw.wq, s.xb, s.q);
        cx.matmul(lw.wk, s.xb, s.k);
        cx.matmul(lw.wv, s.xb, s.v);
        cx.rms_norm(s.q, Some(lw.q_norm), eps, hd, s.q);
        cx.tap("Qcur_normed", s.q)?;
        cx.rms_norm(s.k, Some(lw.k_norm), eps, hd, s.k);
        cx.tap("Kcur_normed", s.k)?;
        let rope = rope_params(m.spec(), hp, ld);
        cx.rope(s.q, &rope, pos0);
        cx.rope(s.k, &rope, pos0);
        cx.tap("Qcur", s.q)?;
        cx.tap("Kcur", s.k)?;
        cx.tap("Vcur", s.v)?;
        cx.attention(kv[l], s.q, s.k, s.v, s.att, pos0, &attn_params(hp, ld));
        cx.tap("kqv_out", s.att)?;
        cx.matmul(lw.wo, s.att, s.proj);
        cx.rms_norm(s.proj, Some(lw.attn_post_norm), eps, d, s.proj);
        cx.tap("attn_post_norm", s.proj)?;
        cx.add(x, s.proj);
        cx.tap("sa_out", x)?;

        // Feed-forward.
        cx.rms_norm(x, Some(lw.ffn_norm), eps, d, s.xb);
        cx.tap("ffn_norm", s.xb)?;
        cx.matmul(lw.ffn_up, s.xb, s.up);
        cx.tap("ffn_up", s.up)?;
        cx.matmul(lw.ffn_gate, s.xb, s.gate);
        cx.tap("ffn_gate", s.gate)?;
        cx.glu(m.spec().ffn, s.gate, s.up);
        cx.tap("ffn_geglu", s.gate)?;
        cx.matmul(lw.ffn_down, s.gate, s.proj);
        cx.tap("ffn_out", s.proj)?;
        cx.rms_norm(s.proj, Some(lw.ffn_post_norm), eps, d, s.proj);
        cx.tap("ffn_post_norm", s.proj)?;
        cx.add(x, s.proj);
        cx.tap("l_out", x)?;
    }

    head::run(step, x, w.output_norm, w.output, hp, out)
}
