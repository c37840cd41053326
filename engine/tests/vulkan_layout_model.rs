//! The GPU kernel layout (`KernelLayout::Gpu`: the kernels a discrete GPU
//! runs) through whole models on whatever device the tests have (lavapipe
//! in CI picks the CPU layout by itself, so without this only the op tests
//! would run these kernels): a 300-token prompt and decode steps past 256
//! positions (split-K attention), replayed, against the CPU.

use crate::model_support;
use crate::vulkan_support;

use std::sync::Arc;

use engine::session::{Outputs, Session, SessionConfig};
use engine::vulkan::KernelLayout;
use model_support::Tiny;
use vulkan_support::nmse;

#[test]
fn whole_models_on_the_gpu_kernel_layout_agree_with_the_cpu() {
    const PROMPT: usize = 300;
    const STEPS: usize = 5;
    for t in [Tiny::llama(), Tiny::gemma3()] {
        let t = Tiny { n_ctx: 512, ..t };
        let m = t.model();
        let toks: Vec<u32> = (0..PROMPT)
            .map(|i| ((i * 7 + 3) as u64 % t.n_vocab) as u32)
            .collect();
        let run = |g: i64, layout: Option<KernelLayout>| {
            let mut req = vulkan_support::session::request(g);
            req.vk.kernel_layout = layout;
            let (mut s, plan) =
                Session::on_devices(Arc::clone(&m), &req, &SessionConfig::default())
                    .expect("the session opens");
            let mut out = s.forward(&toks, Outputs::All, None).unwrap().to_vec();
            for i in 0..STEPS {
                out.extend_from_slice(s.decode((i * 5 + 1) as u32 % t.n_vocab as u32).unwrap());
            }
            let msgs = s.devices().validation_messages();
            assert!(msgs.is_empty(), "{plan}: {msgs:?}");
            (out, s.devices().submissions())
        };
        let (cpu, _) = run(0, None);
        let (gpu, (_, replays)) = run(-1, Some(KernelLayout::Gpu));
        let e = nmse(&cpu, &gpu);
        // The hybrid test's bound (f32 sums in another order, then
        // quantized activations); measured on lavapipe: llama 3.7e-4,
        // gemma3 5.8e-5.
        assert!(e < 2.5e-3, "{}: NMSE {e:e} against the CPU", t.arch);
        assert!(replays >= STEPS - 1, "{}: {replays} replays", t.arch);
    }
}

/// A llama with the attention projections' biases on the GPU kernel
/// layout: each bias add is a dispatch of its own that writes the
/// product's output, so no decode fusion rule joins an op to the product
/// across it (the RoPE and cache-write epilogues, the output projection's
/// add) and skips the bias: with every rule on, the logits are the bits
/// of every rule off, and both agree with the CPU.
#[test]
fn biases_on_the_gpu_kernel_layout_keep_the_unfused_bits() {
    use engine::vulkan::Unfused;
    let t = Tiny {
        biases: true,
        ..Tiny::llama()
    };
    let m = t.model();
    let toks: Vec<u32> = (0..7).map(|i| ((i * 7 + 3) % t.n_vocab) as u32).collect();
    let decode = [1, 6, 11, 16, 21];
    let run = |g: i64, unfused: Unfused| {
        let mut req = vulkan_support::session::request(g);
        req.vk.kernel_layout = (g != 0).then_some(KernelLayout::Gpu);
        req.vk.unfused = unfused;
        vulkan_support::session::logits(&m, &req, &toks, &decode).0
    };
    let all_off: Unfused = Unfused::names().parse().unwrap();
    let cpu = run(0, Unfused::default());
    let fused = run(-1, Unfused::default());
    let plain = run(-1, all_off);
    assert_eq!(
        vulkan_support::bits(&fused),
        vulkan_support::bits(&plain),
        "the decode fusions changed the bits of a model with biases"
    );
    let e = nmse(&cpu, &fused);
    // The bound of the test above (products of f32 rows against the CPU's
    // quantized ones).
    assert!(e < 2.5e-3, "NMSE {e:e} against the CPU");
}
