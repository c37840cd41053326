//! The fault `expert-cache-stale` (a slot given a new expert without its
//! weights) shows where it happens: layer 0's `ffn_moe_up` of a token that
//! routes to a refilled slot, the synthetic Qwen3-MoE with every layer on
//! the GPU and 16 of its 32 experts in slots, one token a pass. Without
//! the fault the same taps agree with the plain GPU path's. Its own test
//! binary: a fault is set for the whole process.
#![cfg(feature = "fault-injection")]

#[path = "gguf_support/mod.rs"]
mod gguf_support;
mod model_support;
mod vulkan_support;

use std::sync::Arc;

use engine::expert_cache::CacheSize;
use engine::model::Model;
use engine::session::{Outputs, Session, SessionConfig};
use engine::setup::GpuRequest;
use engine::trace::Recorder;
use model_support::gguf_support::model_path;
use vulkan_support::nmse;
use vulkan_support::session::load;

/// Every layer on the GPU, with `moe_cache` slots.
fn request(moe_cache: Option<CacheSize>) -> GpuRequest {
    GpuRequest {
        moe_cache,
        ..vulkan_support::session::request(-1)
    }
}

/// Layer 0's `ffn_moe_up` of each of 9 tokens, one pass each.
fn up_per_token(m: &Arc<Model>, cache: Option<CacheSize>) -> Vec<Vec<f32>> {
    let cfg = SessionConfig::default();
    let (mut s, _) = Session::on_devices(Arc::clone(m), &request(cache), &cfg).unwrap();
    let mut out = Vec::new();
    for i in 0..9u32 {
        let mut rec = Recorder::filtered(|name, layer| layer == Some(0) && name == "ffn_moe_up");
        s.forward(&[100 + 37 * i], Outputs::Last, Some(&mut rec))
            .unwrap();
        out.push(rec.taps.pop().expect("ffn_moe_up-0").data);
    }
    assert!(s.devices().validation_messages().is_empty());
    out
}

#[test]
fn a_stale_slot_shows_at_layer_0_ffn_moe_up() {
    let m = load(&model_path("synth-qwen3moe.gguf"));
    let plain = up_per_token(&m, None);
    let half = Some(CacheSize::Slots(16));
    let clean = up_per_token(&m, half);
    let stale = {
        let _f = engine::fault::Injected::new(&["expert-cache-stale"]).unwrap();
        up_per_token(&m, half)
    };
    let e = |a: &[Vec<f32>], t: usize| nmse(&plain[t], &a[t]);
    for t in 0..9 {
        assert!(
            e(&clean, t) < 2.5e-3,
            "token {t}: clean NMSE {:e}",
            e(&clean, t)
        );
    }
    // The first pass finds the slots as loaded; a later one reads a refill.
    assert!(e(&stale, 0) < 2.5e-3);
    let worst = (1..9).map(|t| e(&stale, t)).fold(0.0, f64::max);
    eprintln!("stale slots: layer 0 ffn_moe_up NMSE up to {worst:.2e}");
    assert!(worst > 1e-2, "the stale slot went unseen: {worst:e}");
}
