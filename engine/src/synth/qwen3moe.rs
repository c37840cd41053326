//! Qwen3-MoE in miniature, shaped like Qwen3-30B-A3B: Qwen3's attention
//! (GQA, QK-norm, NEOX RoPE) and, in place of the dense FFN, 32 experts of
//! which 8 are used per token. llama.cpp (src/models/qwen3moe.cpp) routes
//! with a softmax over `ffn_gate_inp`'s logits, takes the top
//! `expert_used_count`, and always renormalises their weights to sum to 1
//! (Qwen3-MoE's norm_topk_prob; llama.cpp hard-codes it for this
//! architecture, no metadata key). It reads, besides Qwen3's keys,
//! `qwen3moe.expert_count`, `expert_used_count` and
//! `expert_feed_forward_length`. Tensors beyond the attention block, in
//! ggml `ne` order:
//!
//! ```text
//! blk.N.ffn_gate_inp.weight   [n_embd, n_expert]             (router, kept F32)
//! blk.N.ffn_gate_exps.weight  [n_embd, n_ff_exp, n_expert]
//! blk.N.ffn_up_exps.weight    [n_embd, n_ff_exp, n_expert]
//! blk.N.ffn_down_exps.weight  [n_ff_exp, n_embd, n_expert]
//! ```
//!
//! With `router_twins` T (`sharpi synth --router-twins T`), the router's
//! rows of experts `n_expert - T ..` are copies of experts `0 .. T`'s:
//! each such pair gets the same logit bit for bit (the router is F32 and
//! every row goes through the same dot), so their probabilities tie
//! exactly at every token, and which of the two comes first, or is chosen
//! at all when they straddle the `expert_used_count` boundary, is decided
//! by the top-k's tie order alone (llama.cpp: its CPU `argsort`,
//! libstdc++'s `std::sort`). The experts themselves stay distinct.

use super::{
    arch_u32, transformer_metadata, transformer_tensors, Arch, Config, Init, Scales, TensorSpec,
};
use crate::gguf::Value;
use crate::quantize::FileType;

/// 3 layers, width 256, 8 query heads and 2 KV heads of 128, 32 experts of
/// width 256 with 8 used. `feed_forward_length` is 8 * 256 = 2048, what
/// llama.cpp would derive without `expert_feed_forward_length`.
pub fn config(seed: u64) -> Config {
    Config {
        arch: Arch::Qwen3Moe,
        seed,
        n_layer: 3,
        n_embd: 256,
        n_head: 8,
        n_head_kv: 2,
        head_dim: 128,
        n_ff: 2048,
        n_expert: 32,
        n_expert_used: 8,
        n_ff_exp: 256,
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
    let mut m = transformer_metadata(cfg);
    m.extend([
        arch_u32(cfg, "expert_used_count", cfg.n_expert_used),
        arch_u32(cfg, "expert_count", cfg.n_expert),
        arch_u32(cfg, "expert_feed_forward_length", cfg.n_ff_exp),
    ]);
    m
}

pub fn tensors(cfg: &Config, n_vocab: u64) -> Vec<TensorSpec> {
    let d = u64::from(cfg.n_embd);
    let ff = u64::from(cfg.n_ff_exp);
    let e = u64::from(cfg.n_expert);
    let s = cfg.scales;
    transformer_tensors(cfg, n_vocab, |i, t| {
        let b = |n: &str| format!("blk.{i}.{n}.weight");
        let mut router = TensorSpec::matrix(b("ffn_gate_inp"), &[d, e], s.router);
        if let (Init::Normal { std }, twins @ 1..) = (router.init, cfg.router_twins) {
            router.init = Init::TwinRows { std, twins };
        }
        t.push(router);
        t.push(TensorSpec::matrix(b("ffn_gate_exps"), &[d, ff, e], s.proj));
        t.push(TensorSpec::matrix(b("ffn_up_exps"), &[d, ff, e], s.proj));
        t.push(TensorSpec::matrix(b("ffn_down_exps"), &[ff, d, e], s.proj));
    })
}
