//! The synthetic Qwen3-MoE model (`sharpi synth --arch qwen3moe`,
//! models/synth-qwen3moe.gguf: 32 experts, 8 used) on a Vulkan device
//! against the CPU: every layer's routed feed-forward (router, softmax,
//! top-k, renormalisation, expert products, weighted sum) on the GPU, a
//! 9-token prefill then a decode step, validation on.

use crate::model_support;
use crate::vulkan_support;

use model_support::gguf_support::model_path;
use vulkan_support::nmse;
use vulkan_support::session::{load, logits, request};

#[test]
fn synthetic_qwen3moe_on_the_gpu_agrees_with_the_cpu() {
    let m = load(&model_path("synth-qwen3moe.gguf"));
    let toks: Vec<u32> = (0..9).map(|i| 100 + 37 * i).collect();
    let (cpu, _) = logits(&m, &request(0), &toks, &[17]);
    let (gpu, _) = logits(&m, &request(-1), &toks, &[17]);
    let nmse = nmse(&cpu, &gpu);
    eprintln!("synth-qwen3moe -g -1: logits NMSE vs CPU {nmse:.2e}");
    // The GPU's products multiply f32 activations, the CPU's quantize them
    // first: measured 1.8e-4 on lavapipe. The limit is vulkan_hybrid.rs's.
    assert!(nmse < 2.5e-3, "NMSE {nmse:e}");
}
