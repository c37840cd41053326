//! The synthetic Qwen3-MoE model (`sharpi synth --arch qwen3moe`,
//! models/synth-qwen3moe.gguf: 32 experts, 8 used) on a Vulkan device
//! against the CPU: every layer's routed feed-forward (router, softmax,
//! top-k, renormalisation, expert products, weighted sum) on the GPU, a
//! 9-token prefill then a decode step, validation on.

mod model_support;

use std::path::Path;
use std::sync::Arc;

use engine::model::Model;
use engine::session::{Outputs, Session, SessionConfig};
use engine::setup::GpuRequest;
use engine::vulkan::VulkanOptions;
use model_support::gguf_support::model_path;

fn request(gpu_layers: i64) -> GpuRequest {
    GpuRequest {
        gpu_layers: gpu_layers.try_into().expect("-1, 0 or N"),
        fixed_on: None,
        threads: 2,
        vk: VulkanOptions {
            device: std::env::var("SHARPI_VK_DEVICE")
                .map(|s| s.parse().expect("infallible"))
                .unwrap_or_default(),
            validation: true,
        },
        memory_limit: None,
        moe_cache: None,
    }
}

fn logits(m: &Arc<Model>, gpu_layers: i64, toks: &[u32]) -> Vec<f32> {
    let cfg = SessionConfig::default();
    let (mut s, plan) = Session::on_devices(Arc::clone(m), &request(gpu_layers), &cfg).unwrap();
    let mut out = s.forward(toks, Outputs::All, None).unwrap().to_vec();
    out.extend_from_slice(s.decode(17).unwrap());
    let msgs = s.devices().validation_messages();
    assert!(msgs.is_empty(), "{plan}: {msgs:?}");
    out
}

#[test]
fn synthetic_qwen3moe_on_the_gpu_agrees_with_the_cpu() {
    let m = Arc::new(Model::load(Path::new(&model_path("synth-qwen3moe.gguf"))).unwrap());
    let toks: Vec<u32> = (0..9).map(|i| 100 + 37 * i).collect();
    let cpu = logits(&m, 0, &toks);
    let gpu = logits(&m, -1, &toks);
    let (mut e, mut r) = (0f64, 0f64);
    for (w, g) in cpu.iter().zip(&gpu) {
        e += (f64::from(*w) - f64::from(*g)).powi(2);
        r += f64::from(*w).powi(2);
    }
    let nmse = e / r;
    eprintln!("synth-qwen3moe -g -1: logits NMSE vs CPU {nmse:.2e}");
    // The GPU's products multiply f32 activations, the CPU's quantize them
    // first: measured 1.8e-4 on lavapipe. The limit is vulkan_hybrid.rs's.
    assert!(nmse < 2.5e-3, "NMSE {nmse:e}");
}
