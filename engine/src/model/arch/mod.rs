//! One forward pass per architecture, over [`crate::ops::Ops`].

mod attn;
mod ffn;
pub mod gemma3;
pub mod llama;
pub mod qwen3;

use super::hparams::{Hparams, LayerDesc};
use super::spec::{Arch, ArchSpec};
use super::weights::RoleMap;
use super::{HeadOut, Model, Step};
use crate::fault;
use crate::ops::{AttnParams, BackendError, Kv, RopeParams, RopeStyle, Weight};

/// A model's weights as handles of the devices that run each part, in the
/// shape its architecture's forward pass wants.
pub enum ArchWeights {
    Llama(llama::Weights),
    Gemma3(gemma3::Weights),
    Qwen3(qwen3::Weights),
}

impl ArchWeights {
    /// `global`: token_embd (on the embedding's device), output_norm and
    /// output (on the head's); `layers[l]`: layer `l`'s, on its device.
    pub fn new(m: &Model, global: &RoleMap<Weight>, layers: &[RoleMap<Weight>]) -> ArchWeights {
        match m.arch() {
            Arch::Llama => ArchWeights::Llama(llama::Weights::new(m, global, layers)),
            Arch::Gemma3 => ArchWeights::Gemma3(gemma3::Weights::new(global, layers)),
            Arch::Qwen3 | Arch::Qwen3Moe => {
                ArchWeights::Qwen3(qwen3::Weights::new(m, global, layers))
            }
        }
    }

    /// Runs `tokens` (at positions `pos0..`) through the model: K/V into
    /// `kv`, logits of the rows `out` asks for.
    pub fn forward(
        &self,
        m: &Model,
        step: &mut Step<'_>,
        kv: &[Kv],
        tokens: &[u32],
        pos0: usize,
        out: HeadOut<'_>,
    ) -> Result<(), BackendError> {
        match self {
            ArchWeights::Llama(w) => llama::forward(m, w, step, kv, tokens, pos0, out),
            ArchWeights::Gemma3(w) => gemma3::forward(m, w, step, kv, tokens, pos0, out),
            ArchWeights::Qwen3(w) => qwen3::forward(m, w, step, kv, tokens, pos0, out),
        }
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

/// Attention of layer `ld`.
fn attn_params(hp: &Hparams, ld: &LayerDesc) -> AttnParams {
    AttnParams {
        n_head: hp.n_head,
        n_kv_head: hp.n_kv_head,
        head_dim_k: hp.head_dim_k,
        head_dim_v: hp.head_dim_v,
        scale: hp.attn_scale,
        window: ld.window(),
        softcap: None,
    }
}
