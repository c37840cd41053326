//! The expert slot cache (`--moe-cache`) on a Vulkan device: the synthetic
//! Qwen3-MoE model (32 experts, 8 used) with every layer on the GPU and
//! its experts on the host, 0, 16 and 32 slots per layer, against the
//! plain GPU path (experts in device memory). A 9-token prefill then
//! decode steps, validation on. The cache size changes where an expert is
//! multiplied, not the result.

use crate::model_support;
use crate::vulkan_support;

use std::sync::Arc;

use engine::expert_cache::{CacheSize, LayerStats};
use engine::model::Model;
use engine::session::{Outputs, Session, SessionConfig};
use engine::setup::GpuRequest;
use model_support::gguf_support::model_path;
use vulkan_support::nmse;
use vulkan_support::session::{load, logits};

/// `gpu_layers` on the GPU, with `moe_cache` slots.
fn request(gpu_layers: i64, moe_cache: Option<CacheSize>) -> GpuRequest {
    GpuRequest {
        moe_cache,
        ..vulkan_support::session::request(gpu_layers)
    }
}

/// Logits of every prompt position and of three decode steps, and the
/// cache's counts.
fn run(m: &Arc<Model>, gpu_layers: i64, cache: Option<CacheSize>) -> (Vec<f32>, Vec<LayerStats>) {
    let toks: Vec<u32> = (0..9).map(|i| 100 + 37 * i).collect();
    let (out, s) = logits(m, &request(gpu_layers, cache), &toks, &[17, 401, 17]);
    (out, s.expert_stats())
}

#[test]
fn the_cache_size_changes_where_experts_run_not_the_logits() {
    let m = load(&model_path("synth-qwen3moe.gguf"));
    let n_layer = m.hparams().n_layer;
    let (gpu, none) = run(&m, -1, None);
    assert!(none.is_empty());
    let (cpu, _) = run(&m, 0, None);

    // Every expert in a slot: the plain GPU path's very products.
    let (full, stats) = run(&m, -1, Some(CacheSize::Slots(32)));
    assert_eq!(stats.len(), n_layer);
    for s in &stats {
        assert_eq!(
            (s.slots, s.hits, s.pairs),
            (32, s.pairs, (9 + 3) * 8),
            "{s:?}"
        );
    }
    assert_eq!(full, gpu, "a full cache is the GPU path");

    // No slots: every expert on the host.
    let (zero, stats) = run(&m, -1, Some(CacheSize::Slots(0)));
    assert!(
        stats.iter().all(|s| s.hits == 0 && s.pairs == 96),
        "{stats:?}"
    );
    // Half: some of each, slots refilled as experts are missed.
    let (half, stats) = run(&m, -1, Some(CacheSize::Slots(16)));
    let (hits, pairs) = stats
        .iter()
        .fold((0, 0), |(h, p), s| (h + s.hits, p + s.pairs));
    eprintln!("16 of 32 slots: {hits} of {pairs} hits");
    assert!(0 < hits && hits < pairs, "{stats:?}");
    // A hybrid with the cache: layer 0 cached on the GPU, the rest on the CPU.
    let (hybrid, stats) = run(&m, 1, Some(CacheSize::Slots(8)));
    assert_eq!(stats.len(), 1);

    for (what, got) in [
        ("0 slots", &zero),
        ("16 slots", &half),
        ("-g 1, 8 slots", &hybrid),
    ] {
        let (eg, ec) = (nmse(&gpu, got), nmse(&cpu, got));
        eprintln!("{what}: logits NMSE vs GPU {eg:.2e}, vs CPU {ec:.2e}");
        // The limit of vulkan_hybrid.rs (CPU against GPU products).
        assert!(eg < 2.5e-3 && ec < 2.5e-3, "{what}: NMSE {eg:e} / {ec:e}");
    }
    let e = nmse(&zero, &half);
    assert!(e < 2.5e-3, "0 against 16 slots: NMSE {e:e}");
}

#[test]
fn the_plan_counts_slots_instead_of_experts() {
    let m = load(&model_path("synth-qwen3moe.gguf"));
    let cfg = SessionConfig::default();
    let gpu_bytes = |cache| {
        let (_, plan) = Session::on_devices(Arc::clone(&m), &request(-1, cache), &cfg).unwrap();
        let d = plan.limits.iter().position(Option::is_some).expect("a GPU");
        plan.bytes[d]
    };
    let plain = gpu_bytes(None);
    let (zero, half, full) = (
        gpu_bytes(Some(CacheSize::Slots(0))),
        gpu_bytes(Some(CacheSize::Slots(16))),
        gpu_bytes(Some(CacheSize::Slots(99))),
    );
    assert!(zero.weights < half.weights && half.weights < full.weights);
    assert!(full.weights >= plain.weights && full.weights < plain.weights + (1 << 16));
    // In MiB: the slots that fit in 1 MiB for all layers.
    let mib = gpu_bytes(Some(CacheSize::MiB(1)));
    assert!(
        mib.weights <= zero.weights + (1 << 20) + (1 << 16),
        "{mib:?}"
    );
}

/// Layer 0's expert taps of a 9-token prefill.
fn taps(m: &Arc<Model>, cache: Option<CacheSize>) -> Vec<engine::trace::Recorded> {
    let toks: Vec<u32> = (0..9).map(|i| 100 + 37 * i).collect();
    let cfg = SessionConfig::default();
    let (mut s, _) = Session::on_devices(Arc::clone(m), &request(-1, cache), &cfg).unwrap();
    let mut rec = engine::trace::Recorder::filtered(|name, layer| {
        layer == Some(0) && name.starts_with("ffn_moe_")
    });
    s.forward(&toks, Outputs::Last, Some(&mut rec)).unwrap();
    assert!(s.devices().validation_messages().is_empty());
    rec.taps
}

#[test]
fn expert_taps_are_assembled_from_both_devices() {
    let m = load(&model_path("synth-qwen3moe.gguf"));
    let gpu = taps(&m, None);
    for cache in [0, 16, 32] {
        let got = taps(&m, Some(CacheSize::Slots(cache)));
        for name in [
            "ffn_moe_up",
            "ffn_moe_gate",
            "ffn_moe_swiglu",
            "ffn_moe_down",
            "ffn_moe_out",
        ] {
            let find = |v: &[engine::trace::Recorded]| {
                v.iter()
                    .find(|t| t.name == name)
                    .unwrap_or_else(|| panic!("{cache} slots: no {name}"))
                    .clone()
            };
            let (want, have) = (find(&gpu), find(&got));
            assert_eq!(want.shape, have.shape, "{cache} slots: {name}");
            let e = nmse(&want.data, &have.data);
            assert!(e < 2.5e-3, "{cache} slots: {name} NMSE {e:e}");
            if cache == 32 {
                assert_eq!(want.data, have.data, "{name}: a full cache is the GPU path");
            }
        }
    }
}
