//! A replayed decode step (the command buffer recorded for the previous
//! step, submitted again with the new position in the inbox) computes the
//! same bits as the same step recorded afresh: all-GPU and hybrid, f32
//! and f16 KV caches, llama and gemma3 (sliding window), the device's own
//! kernel layout and the GPU one, with the validation layer watching both.

use crate::model_support;
use crate::vulkan_support;

use std::sync::Arc;

use engine::model::Model;
use engine::ops::KvType;
use engine::session::{Outputs, Session, SessionConfig};
use engine::setup::GpuRequest;
use engine::vulkan::KernelLayout;
use model_support::Tiny;

/// The logits of a prompt and then of each decode step, and the session's
/// (submissions, replays).
fn run(m: &Arc<Model>, req: &GpuRequest, kv: KvType, steps: usize) -> (Vec<u32>, (usize, usize)) {
    let cfg = SessionConfig {
        kv_type: kv,
        ..SessionConfig::default()
    };
    let (mut s, plan) = Session::on_devices(Arc::clone(m), req, &cfg).unwrap();
    let mut out: Vec<f32> = s
        .forward(&[1, 7, 3, 9, 2], Outputs::All, None)
        .unwrap()
        .to_vec();
    for i in 0..steps {
        // Past the gemma3 model's window of 4 after a few steps.
        out.extend_from_slice(s.decode((i * 3 + 1) as u32 % 40).unwrap());
    }
    let msgs = s.devices().validation_messages();
    assert!(msgs.is_empty(), "{plan}: {msgs:?}");
    (
        out.iter().map(|x| x.to_bits()).collect(),
        s.devices().submissions(),
    )
}

#[test]
fn a_replayed_decode_step_equals_a_fresh_recording_bit_for_bit() {
    const STEPS: usize = 7;
    for t in [Tiny::llama(), Tiny::gemma3()] {
        let m = t.model();
        for kv in [KvType::F32, KvType::F16] {
            // The device's own kernel layout (lavapipe's: the CPU's), and
            // the GPU layout, whose decode step is the fused matvecs with
            // Q, K and V merged into one dispatch.
            for (g, layout) in [(-1, None), (1, None), (-1, Some(KernelLayout::Gpu))] {
                let mut req = vulkan_support::session::request(g);
                req.vk.kernel_layout = layout;
                let (replayed, (subs, replays)) = run(&m, &req, kv, STEPS);
                req.vk.record_every_step = true;
                let (fresh, (fresh_subs, fresh_replays)) = run(&m, &req, kv, STEPS);
                let what = format!("{} -g {g} {layout:?} {kv:?}", t.arch);
                assert_eq!(
                    fresh_replays, 0,
                    "{what}: replays while recording every step"
                );
                assert_eq!(subs, fresh_subs, "{what}: the same submissions");
                // The first decode step records; every later one replays.
                assert!(
                    replays >= STEPS - 1,
                    "{what}: {replays} of {subs} submissions replayed"
                );
                if let Some(i) = (0..fresh.len()).find(|&i| fresh[i] != replayed[i]) {
                    panic!(
                        "{what}: logit {i} replayed {} against fresh {}",
                        f32::from_bits(replayed[i]),
                        f32::from_bits(fresh[i])
                    );
                }
            }
        }
    }
}
