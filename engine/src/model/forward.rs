//! The forward pass of every architecture: one pre-norm transformer block
//! per layer, over [`crate::ops::Ops`]. What differs between
//! architectures is read from the model's table ([`ArchSpec`], as checked
//! at load) and the hyperparameters derived from it; the block never asks
//! which architecture or which backend it runs. llama.cpp:
//! src/models/llama.cpp, qwen3.cpp, qwen3moe.cpp, gemma3.cpp.
//!
//! ```text
//! x = embed(tokens)                          · embed_scale   (gemma3: sqrt(n_embd))
//! per layer:
//!   xb = rms_norm(x) · attn_norm
//!   q, k, v = xb·Wqᵀ, xb·Wkᵀ, xb·Wvᵀ
//!   q, k, v = q + bq, k + bk, v + bv         (where the file has them)
//!   q, k = rms_norm_per_head(q) · q_norm,
//!          rms_norm_per_head(k) · k_norm     (qk_norm: qwen3, gemma3)
//!   q, k = rope(q), rope(k)                  (NORM or NEOX pairing; the layer's base)
//!   a = attention(q, k, v)·Woᵀ               (sliding layers: their window)
//!   a = a + bo                               (where the file has it)
//!   a = rms_norm(a) · attn_post_norm         (post_norms: gemma3)
//!   x += a
//!   xb = rms_norm(x) · ffn_norm
//!   f = (act(xb·Wgateᵀ) ⊙ xb·Wupᵀ)·Wdownᵀ     (act: SiLU or tanh-GELU; or moe(xb))
//!   f = rms_norm(f) · ffn_post_norm          (post_norms)
//!   x += f
//! logits = (rms_norm(x) · output_norm)·Woutᵀ (soft-capped if the file says)
//! ```

use super::hparams::{Hparams, LayerDesc, MoeParams};
use super::moe::{self, MoeWeights};
use super::spec::{ArchSpec, Role};
use super::step::Cx;
use super::{head, HeadOut, Model, RoleMap, Step};
use crate::fault;
use crate::ops::{Act, AttnParams, BackendError, GluKind, Kv, RopeParams, RopeStyle, Weight};
use crate::placement::Stage;

/// A model's weights as handles of the devices that run each part (shapes
/// in ggml order `[n_in, n_out]`).
pub struct ModelWeights {
    /// `[n_embd, n_vocab]`, on the embedding's device.
    tok_embd: Weight,
    /// `[n_embd]`
    output_norm: Weight,
    /// `[n_embd, n_vocab]` (token_embd again when tied), on the head's device.
    output: Weight,
    layers: Vec<LayerWeights>,
}

/// One block's weights, on the layer's device.
struct LayerWeights {
    /// `[n_embd]`
    attn_norm: Weight,
    /// `[n_embd, n_head · head_dim_k]`
    wq: Weight,
    /// `[n_embd, n_kv_head · head_dim_k]`
    wk: Weight,
    /// `[n_embd, n_kv_head · head_dim_v]`
    wv: Weight,
    /// `[head_dim_k]` each, when the architecture norms Q and K per head.
    qk_norm: Option<(Weight, Weight)>,
    /// `[n_head · head_dim_v, n_embd]`
    wo: Weight,
    /// The projections' biases, where the file has them.
    bias: Biases,
    /// `[n_embd]`, when the architecture norms the attention output.
    attn_post_norm: Option<Weight>,
    /// `[n_embd]`
    ffn_norm: Weight,
    ffn: Ffn,
    /// `[n_embd]`, when the architecture norms the FFN output.
    ffn_post_norm: Option<Weight>,
}

/// A layer's attention biases (`[width of the product]` each): llama.cpp's
/// `bq`, `bk`, `bv`, `bo`.
struct Biases {
    q: Option<Weight>,
    k: Option<Weight>,
    v: Option<Weight>,
    out: Option<Weight>,
}

impl Biases {
    fn of(t: &RoleMap<Weight>) -> Biases {
        Biases {
            q: t.get_opt(Role::AttnQBias),
            k: t.get_opt(Role::AttnKBias),
            v: t.get_opt(Role::AttnVBias),
            out: t.get_opt(Role::AttnOutBias),
        }
    }
}

/// `x += bias` on every row, where there is a bias.
fn add_bias(cx: &mut Cx<'_, '_>, x: Act, bias: Option<Weight>) {
    if let Some(b) = bias {
        cx.add_bias(x, b);
    }
}

/// A block's feed-forward: dense gated (SwiGLU / GeGLU) or a mixture of
/// experts ([`crate::model::moe`]).
enum Ffn {
    Dense {
        /// `[n_embd, n_ff]`
        gate: Weight,
        /// `[n_embd, n_ff]`
        up: Weight,
        /// `[n_ff, n_embd]`
        down: Weight,
    },
    Moe(MoeWeights, MoeParams),
}

impl ModelWeights {
    /// `global`: token_embd (on the embedding's device), output_norm and
    /// output (on the head's); `layers[l]`: layer `l`'s, on its device.
    /// Takes the roles `m`'s table lists.
    pub fn new(m: &Model, global: &RoleMap<Weight>, layers: &[RoleMap<Weight>]) -> ModelWeights {
        let spec = m.spec();
        ModelWeights {
            tok_embd: global.get(Role::TokEmbd),
            output_norm: global.get(Role::OutputNorm),
            output: global.get(Role::Output),
            layers: layers
                .iter()
                .map(|t| LayerWeights {
                    attn_norm: t.get(Role::AttnNorm),
                    wq: t.get(Role::AttnQ),
                    wk: t.get(Role::AttnK),
                    wv: t.get(Role::AttnV),
                    qk_norm: spec
                        .qk_norm
                        .then(|| (t.get(Role::AttnQNorm), t.get(Role::AttnKNorm))),
                    wo: t.get(Role::AttnOut),
                    bias: Biases::of(t),
                    attn_post_norm: spec.post_norms.then(|| t.get(Role::AttnPostNorm)),
                    ffn_norm: t.get(Role::FfnNorm),
                    ffn: match m.hparams().moe {
                        None => Ffn::Dense {
                            gate: t.get(Role::FfnGate),
                            up: t.get(Role::FfnUp),
                            down: t.get(Role::FfnDown),
                        },
                        Some(p) => Ffn::Moe(MoeWeights::new(t), p),
                    },
                    ffn_post_norm: spec.post_norms.then(|| t.get(Role::FfnPostNorm)),
                })
                .collect(),
        }
    }

    /// Runs `tokens` (at positions `pos0..pos0 + n`) through the model: K/V
    /// into `kv`, logits of the rows `out` asks for. Taps, in order, the
    /// names [`crate::trace`] lists.
    pub fn forward(
        &self,
        m: &Model,
        step: &mut Step<'_>,
        kv: &[Kv],
        tokens: &[u32],
        pos0: usize,
        out: HeadOut<'_>,
    ) -> Result<(), BackendError> {
        let (spec, hp) = (m.spec(), m.hparams());
        let (n, eps, d, hd) = (tokens.len(), hp.rms_eps, hp.n_embd, hp.head_dim_k);

        // x: [n, n_embd], the residual stream.
        let mut x = step.hidden(Stage::Embed, n);
        {
            let mut cx = step.at(Stage::Embed);
            cx.embed(self.tok_embd, tokens, x);
            if let Some(scale) = hp.embed_scale {
                cx.scale(x, scale);
                cx.tap("inp_scaled", x)?;
            }
        }

        for (l, (w, ld)) in self.layers.iter().zip(m.layers()).enumerate() {
            let stage = Stage::Layer(l);
            x = step.handoff(x, stage)?;
            // xb [n, n_embd], q [n, n_head·hd_k], k [n, n_kv_head·hd_k],
            // v [n, n_kv_head·hd_v], att [n, n_head·hd_v], proj [n, n_embd],
            // gate/up [n, ffn_width]
            let s = step.scratch(stage, n);
            let mut cx = step.at(stage);

            // Self-attention.
            cx.rms_norm(x, Some(w.attn_norm), eps, d, s.xb);
            cx.tap("attn_norm", s.xb)?;
            cx.matmul(w.wq, s.xb, s.q);
            cx.matmul(w.wk, s.xb, s.k);
            cx.matmul(w.wv, s.xb, s.v);
            // After all three products: Q, K and V stay one run of
            // products of one normed row for the GPU's decode fusion.
            add_bias(&mut cx, s.q, w.bias.q);
            add_bias(&mut cx, s.k, w.bias.k);
            add_bias(&mut cx, s.v, w.bias.v);
            if let Some((q_norm, k_norm)) = w.qk_norm {
                cx.rms_norm(s.q, Some(q_norm), eps, hd, s.q);
                cx.tap("Qcur_normed", s.q)?;
                cx.rms_norm(s.k, Some(k_norm), eps, hd, s.k);
                cx.tap("Kcur_normed", s.k)?;
            }
            let rope = rope_params(spec, hp, ld);
            cx.rope(s.q, &rope, pos0);
            cx.rope(s.k, &rope, pos0);
            cx.tap("Qcur", s.q)?;
            cx.tap("Kcur", s.k)?;
            cx.tap("Vcur", s.v)?;
            let (q_scale, attn) = attn_params(spec, hp, ld, l);
            if let Some(scale) = q_scale {
                cx.scale(s.q, scale);
            }
            cx.attention(kv[l], s.q, s.k, s.v, s.att, pos0, &attn);
            cx.tap("kqv_out", s.att)?;
            cx.matmul(w.wo, s.att, s.proj);
            add_bias(&mut cx, s.proj, w.bias.out);
            if let Some(name) = spec.taps.attn_out {
                cx.tap(name, s.proj)?;
            }
            if let Some(norm) = w.attn_post_norm {
                cx.rms_norm(s.proj, Some(norm), eps, d, s.proj);
                cx.tap("attn_post_norm", s.proj)?;
            }
            cx.add(x, s.proj);
            cx.tap(spec.taps.ffn_inp, x)?;

            // Feed-forward.
            cx.rms_norm(x, Some(w.ffn_norm), eps, d, s.xb);
            cx.tap("ffn_norm", s.xb)?;
            match &w.ffn {
                Ffn::Dense { gate, up, down } => {
                    cx.matmul(*up, s.xb, s.up);
                    cx.tap("ffn_up", s.up)?;
                    cx.matmul(*gate, s.xb, s.gate);
                    cx.tap("ffn_gate", s.gate)?;
                    cx.glu(spec.ffn, s.gate, s.up);
                    cx.tap(glu_tap(spec.ffn), s.gate)?;
                    cx.matmul(*down, s.gate, s.proj);
                    cx.tap("ffn_out", s.proj)?;
                }
                Ffn::Moe(experts, p) => {
                    moe::run(&mut cx, experts, p, spec.ffn, s.xb, &s, s.proj)?;
                }
            }
            if let Some(norm) = w.ffn_post_norm {
                cx.rms_norm(s.proj, Some(norm), eps, d, s.proj);
                cx.tap("ffn_post_norm", s.proj)?;
            }
            cx.add(x, s.proj);
            cx.tap("l_out", x)?;
        }

        head::run(step, x, self.output_norm, self.output, hp, out)
    }
}

/// llama.cpp's name for the gated activation's output.
fn glu_tap(kind: GluKind) -> &'static str {
    match kind {
        GluKind::SwiGlu => "ffn_swiglu",
        GluKind::GeGluTanh => "ffn_geglu",
    }
}

/// RoPE of layer `ld` for Q and K.
fn rope_params(spec: &ArchSpec, hp: &Hparams, ld: &LayerDesc) -> RopeParams {
    let style = match spec.rope {
        RopeStyle::Norm if fault::active("rope-style") => RopeStyle::Neox,
        RopeStyle::Neox if fault::active("rope-style") => RopeStyle::Norm,
        s => s,
    };
    RopeParams {
        style,
        head_dim: hp.head_dim_k,
        n_rot: hp.n_rot,
        base: ld.rope_base,
        freq_scale: ld.rope_freq_scale,
    }
}

/// Attention of layer `l` (`ld`), and the scale that multiplies the query
/// before it where the architecture scales the query rather than the
/// scores ([`super::spec::AttnScale::on_query`]; the attention's own scale is then 1).
fn attn_params(
    spec: &ArchSpec,
    hp: &Hparams,
    ld: &LayerDesc,
    l: usize,
) -> (Option<f32>, AttnParams) {
    let scale = if l + 1 == hp.n_layer && fault::active("last-layer-scale") {
        hp.attn_scale * (1.0 + 1e-6)
    } else {
        hp.attn_scale
    };
    let on_query = spec.attn_scale.on_query() && !fault::active("query-scale-late");
    let params = AttnParams {
        n_head: hp.n_head,
        n_kv_head: hp.n_kv_head,
        head_dim_k: hp.head_dim_k,
        head_dim_v: hp.head_dim_v,
        scale: if on_query { 1.0 } else { scale },
        window: ld.window(),
        softcap: None,
    };
    (on_query.then_some(scale), params)
}
