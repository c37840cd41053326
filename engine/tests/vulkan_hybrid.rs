//! Hybrid placement on a real Vulkan device (lavapipe in CI): tiny llama
//! and gemma3 models with any number of layers on the GPU and the
//! embedding and head on either side agree with the CPU; the memory plan
//! made before loading is an upper bound of what the GPU then allocates,
//! and a plan that does not fit is refused in one line.

mod model_support;
mod vulkan_support;

use std::sync::Arc;

use engine::model::Model;
use engine::placement::{GpuRequest, Side};
use engine::session::{Outputs, Session, SessionConfig};
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
    for t in [Tiny::llama(), Tiny::gemma3()] {
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
                // 5.8e-4 (llama, -g 1), 8.3e-5 (gemma3); 0 for -g 0.
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
