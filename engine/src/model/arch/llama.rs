//! Llama (SmolLM2; Mixtral-style with experts): pre-norm blocks, NORM
//! RoPE, SwiGLU or a mixture of experts, tied or separate head. llama.cpp:
//! src/models/llama.cpp.
//!
//! Per layer, with `x` the residual stream:
//! ```text
//! xb = rms_norm(x) · attn_norm
//! q, k, v = xb·Wqᵀ, xb·Wkᵀ, xb·Wvᵀ;  q, k = rope(q), rope(k)
//! x += attention(q, k, v)·Woᵀ
//! xb = rms_norm(x) · ffn_norm
//! x += (silu(xb·Wgateᵀ) ⊙ xb·Wupᵀ)·Wdownᵀ      (or moe(xb))
//! ```
//! then `logits = (rms_norm(x) · output_norm)·Woutᵀ`.

use super::attn::{self, AttnWeights};
use super::ffn::{self, Ffn};
use crate::model::spec::Role;
use crate::model::{head, HeadOut, Model, RoleMap, Step};
use crate::ops::{BackendError, Kv, Weight};
use crate::placement::Stage;

/// One block's weights.
pub struct Layer {
    attn: AttnWeights,
    /// `[n_embd]`
    ffn_norm: Weight,
    ffn: Ffn,
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
    pub fn new(m: &Model, global: &RoleMap<Weight>, layers: &[RoleMap<Weight>]) -> Weights {
        Weights {
            tok_embd: global.get(Role::TokEmbd),
            output_norm: global.get(Role::OutputNorm),
            output: global.get(Role::Output),
            layers: layers
                .iter()
                .map(|t| Layer {
                    attn: AttnWeights::new(t, m.spec().qk_norm),
                    ffn_norm: t.get(Role::FfnNorm),
                    ffn: Ffn::new(t, m.hparams().moe),
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
    let (n, eps, d) = (tokens.len(), hp.rms_eps, hp.n_embd);

    // x: [n, n_embd], the residual stream.
    let mut x = step.hidden(Stage::Embed, n);
    step.at(Stage::Embed).embed(w.tok_embd, tokens, x);

    for (l, (lw, ld)) in w.layers.iter().zip(m.layers()).enumerate() {
        let stage = Stage::Layer(l);
        x = step.handoff(x, stage)?;
        // xb [n, n_embd], q [n, n_head·hd], k/v [n, n_kv_head·hd], att [n, n_head·hd],
        // proj [n, n_embd], gate/up [n, ffn_width]
        let s = step.scratch(stage, n);
        let mut cx = step.at(stage);

        attn::run(&mut cx, m, ld, &lw.attn, x, &s, kv[l], pos0)?;
        cx.tap("attn_out", s.proj)?;
        cx.add(x, s.proj);
        cx.tap("ffn_inp", x)?;

        cx.rms_norm(x, Some(lw.ffn_norm), eps, d, s.xb);
        cx.tap("ffn_norm", s.xb)?;
        ffn::run(&mut cx, &lw.ffn, m.spec().ffn, s.xb, &s, s.proj)?;
        cx.add(x, s.proj);
        cx.tap("l_out", x)?;
    }

    head::run(step, x, w.output_norm, w.output, hp, out)
}
