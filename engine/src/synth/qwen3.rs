//! Qwen3 in miniature: GQA with QK-norm (RMSNorm over each head's query and
//! key), NEOX RoPE (implied by the architecture in llama.cpp), SwiGLU FFN,
//! untied output head.
//!
//! llama.cpp (src/models/qwen3.cpp) reads `qwen3.context_length`,
//! `embedding_length`, `block_count`, `feed_forward_length`,
//! `attention.head_count`, `attention.head_count_kv`,
//! `attention.key_length` / `value_length` (the head size; without them it
//! is embedding_length / head_count), `rope.freq_base` and
//! `attention.layer_norm_rms_epsilon`; the vocabulary size is the length of
//! `tokenizer.ggml.tokens`. Tensors, in ggml `ne` order:
//!
//! ```text
//! token_embd.weight          [n_embd, n_vocab]
//! blk.N.attn_norm.weight     [n_embd]
//! blk.N.attn_q.weight        [n_embd, head_dim * n_head]
//! blk.N.attn_k.weight        [n_embd, head_dim * n_head_kv]
//! blk.N.attn_v.weight        [n_embd, head_dim * n_head_kv]
//! blk.N.attn_output.weight   [head_dim * n_head, n_embd]
//! blk.N.attn_q_norm.weight   [head_dim]
//! blk.N.attn_k_norm.weight   [head_dim]
//! blk.N.ffn_norm.weight      [n_embd]
//! blk.N.ffn_gate.weight      [n_embd, n_ff]
//! blk.N.ffn_up.weight        [n_embd, n_ff]
//! blk.N.ffn_down.weight      [n_ff, n_embd]
//! output_norm.weight         [n_embd]
//! output.weight              [n_embd, n_vocab]
//! ```

use super::{transformer_metadata, transformer_tensors, Arch, Config, Scales, TensorSpec};
use crate::gguf::Value;
use crate::quantize::FileType;

/// 4 layers, width 256, 8 query heads and 2 KV heads of 128 (Qwen3's head
/// size; the query width 1024 is larger than the model width, as in the
/// real models), FFN 768. Every row length is a multiple of 256, so Q4_K_M
/// needs no fallback types.
pub fn config(seed: u64) -> Config {
    Config {
        arch: Arch::Qwen3,
        seed,
        n_layer: 4,
        n_embd: 256,
        n_head: 8,
        n_head_kv: 2,
        head_dim: 128,
        n_ff: 768,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        context_length: 4096,
        rope_freq_base: 1_000_000.0,
        rms_eps: 1e-6,
        scales: Scales::default(),
        ftype: FileType::Q4_K_M,
        tie_qk: false,
        router_twins: 0,
    }
}

pub fn metadata(cfg: &Config) -> Vec<(String, Value)> {
    transformer_metadata(cfg)
}

pub fn tensors(cfg: &Config, n_vocab: u64) -> Vec<TensorSpec> {
    let d = u64::from(cfg.n_embd);
    let ff = u64::from(cfg.n_ff);
    let p = cfg.scales.proj;
    transformer_tensors(cfg, n_vocab, |i, t| {
        let b = |n: &str| format!("blk.{i}.{n}.weight");
        t.push(TensorSpec::matrix(b("ffn_gate"), &[d, ff], p));
        t.push(TensorSpec::matrix(b("ffn_up"), &[d, ff], p));
        t.push(TensorSpec::matrix(b("ffn_down"), &[ff, d], p));
    })
}
