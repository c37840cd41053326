//! Hybrid placement on a real Vulkan device (lavapipe in CI): tiny llama
//! (with and without attention biases) and gemma3 models with any number of layers on the GPU and the
//! embedding and head on either side agree with the CPU; the memory plan
//! made before loading is an upper bound of what the GPU then allocates,
//! and a plan that does not fit is refused in one line.

use crate::model_support;
use crate::vulkan_support;

use std::sync::Arc;

use engine::model::Model;
use engine::placement::Side;
use engine::session::{Outputs, Session, SessionConfig};
use engine::setup::{AutoFit, GpuLayers, GpuRequest};
use model_support::Tiny;
use vulkan_support::nmse;

/// `gpu_layers` on the GPU, the embedding and head on `fixed_on`, in at
/// most `memory_limit` bytes.
fn request(gpu_layers: i64, fixed_on: Option<Side>, memory_limit: Option<u64>) -> GpuRequest {
    GpuRequest {
        fixed_on,
        memory_limit,
        ..vulkan_support::session::request(gpu_layers)
    }
}

fn tokens(n: usize, vocab: u64) -> Vec<u32> {
    (0..n)
        .map(|i| ((i * 5 + 1) as u64 % vocab) as u32)
        .collect()
}

/// Logits of every position of `toks` and of a decode step.
fn logits(m: &Arc<Model>, req: &GpuRequest, toks: &[u32]) -> Vec<f32> {
    vulkan_support::session::logits(m, req, toks, &[2]).0
}

#[test]
fn any_split_with_embedding_and_head_on_either_side_agrees_with_the_cpu() {
    let biased = Tiny {
        biases: true,
        ..Tiny::llama()
    };
    for t in [Tiny::llama(), Tiny::gemma3(), biased] {
        let m = t.model();
        let toks = tokens(9, t.n_vocab);
        let cpu = logits(&m, &request(0, None, None), &toks);
        let n_layer = t.n_layer as i64;
        for n in 0..=n_layer {
            for fixed in [None, Some(Side::Cpu), Some(Side::Gpu)] {
                let got = logits(&m, &request(n, fixed, None), &toks);
                let e = nmse(&cpu, &got);
                // The GPU's matmuls multiply f32 activations, the CPU's
                // quantize them to Q8 first: on lavapipe measured up to
                // 5.8e-4 (llama, -g 1), 8.3e-5 (gemma3), 1.9e-4 (llama
                // with biases, -g 1); 0 for -g 0.
                assert!(e < 2.5e-3, "{} -g {n} {fixed:?}: NMSE {e:e}", t.arch);
                if n == 0 && fixed != Some(Side::Gpu) {
                    assert_eq!(got, cpu, "{} -g 0 is the CPU path", t.arch);
                }
            }
        }
    }
}

#[test]
fn the_plan_bounds_the_gpu_allocation_and_refuses_what_does_not_fit() {
    let t = Tiny::llama();
    let m = t.model();
    let cfg = SessionConfig::default();
    for (g, fixed) in [
        (-1, None),
        (1, None),
        (1, Some(Side::Cpu)),
        (0, Some(Side::Gpu)),
    ] {
        let (_, plan) =
            Session::on_devices(Arc::clone(&m), &request(g, fixed, None), &cfg).unwrap();
        let d = plan.limits.iter().position(Option::is_some).expect("a GPU");
        let need = plan.bytes[d].total();
        // Exactly the planned bytes: it loads and runs (the plan is an
        // upper bound).
        let (mut s, _) = Session::on_devices(Arc::clone(&m), &request(g, fixed, Some(need)), &cfg)
            .unwrap_or_else(|e| panic!("-g {g} {fixed:?} in {need} bytes: {e}"));
        s.forward(&tokens(5, t.n_vocab), Outputs::Last, None)
            .unwrap();
        // One byte less: refused before loading, in one line.
        let e = Session::on_devices(Arc::clone(&m), &request(g, fixed, Some(need - 1)), &cfg)
            .err()
            .expect("does not fit")
            .to_string();
        assert!(
            e.contains("does not fit") && e.contains("-g ") && !e.contains('\n'),
            "{e}"
        );
    }
    // -g -1 in the bytes of -g 1: the error names -g 1 as what fits.
    let (_, plan) = Session::on_devices(Arc::clone(&m), &request(1, None, None), &cfg).unwrap();
    let one = plan.bytes[1].total();
    let e = Session::on_devices(Arc::clone(&m), &request(-1, None, Some(one)), &cfg)
        .err()
        .expect("does not fit")
        .to_string();
    assert!(e.contains("-g 1 fits"), "{e}");
}

#[test]
fn g_auto_places_the_most_layers_that_fit_and_says_so() {
    let t = Tiny::llama();
    let m = t.model();
    let cfg = SessionConfig::default();
    let n_layer = t.n_layer as usize;
    let auto = |limit| GpuRequest {
        gpu_layers: GpuLayers::Auto,
        ..request(0, None, limit)
    };
    let open = |req: &GpuRequest| Session::on_devices(Arc::clone(&m), req, &cfg);
    // Room for everything: every layer, as -g -1.
    let (_, all) = open(&request(-1, None, None)).unwrap();
    let (_, plan) = open(&auto(None)).unwrap();
    assert_eq!((&plan.placement, &plan.bytes), (&all.placement, &all.bytes));
    assert_eq!(plan.auto.map(|a| a.layers), Some(n_layer));
    // Room for the GPU part of -g 1 only: -g 1's plan, and it runs.
    let (_, one) = open(&request(1, None, None)).unwrap();
    let need = one.bytes[1].total();
    let (mut s, plan) = open(&auto(Some(need))).unwrap();
    assert_eq!((&plan.placement, &plan.bytes), (&one.placement, &one.bytes));
    assert_eq!(
        plan.auto,
        Some(AutoFit {
            layers: 1,
            limit: need
        })
    );
    let text = plan.to_string();
    let first = format!("plan: -g auto: 1 of {n_layer} layers fit in ");
    assert!(text.starts_with(&first), "{text}");
    assert_eq!(text.lines().count(), 3, "{text}");
    s.forward(&tokens(5, t.n_vocab), Outputs::Last, None)
        .unwrap();
    // Not even that: every layer on the CPU.
    let (_, cpu) = open(&request(0, None, None)).unwrap();
    let (_, plan) = open(&auto(Some(need - 1))).unwrap();
    assert_eq!((&plan.placement, &plan.bytes), (&cpu.placement, &cpu.bytes));
    assert_eq!(plan.auto.map(|a| a.layers), Some(0));
    // --fixed-on gpu with no room for the embedding and head: refused as
    // -g 0 --fixed-on gpu would be.
    let req = GpuRequest {
        fixed_on: Some(Side::Gpu),
        ..auto(Some(1))
    };
    let e = open(&req).err().expect("does not fit").to_string();
    assert!(
        e.contains("the GPU part of -g auto does not fit")
            && e.contains("nothing fits")
            && !e.contains('\n'),
        "{e}"
    );
}
