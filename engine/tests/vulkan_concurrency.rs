//! Sessions in one process, from many threads at once: CPU, all-GPU,
//! hybrid and expert-cache sessions created, run and dropped concurrently,
//! round after round, with the validation layer (thread-safety checks
//! included) on. Each run must give the very logits the same kind of
//! session gave alone, and no validation message. docs/threading.md holds
//! the contract this exercises; the race it guards against crashed the
//! process inside the validation layer when one thread created or dropped
//! a context while another called into its own.

use crate::model_support;
use crate::vulkan_support;

use std::sync::{Arc, Barrier};
use std::thread;

use engine::expert_cache::CacheSize;
use engine::model::Model;
use engine::session::{Outputs, Session, SessionConfig};
use engine::setup::GpuRequest;
use model_support::gguf_support::model_path;
use model_support::Tiny;
use vulkan_support::session::{load, request};

/// Threads that run sessions at once, and the sessions each runs.
const THREADS: usize = 8;
const ROUNDS: usize = 24;

/// The kinds of session, and what each places where.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Cpu,
    Gpu,
    /// One layer on the GPU, the rest on the CPU.
    Hybrid,
    /// The MoE model, every layer on the GPU, 16 of 32 expert slots.
    ExpertCache,
}

const KINDS: [Kind; 4] = [Kind::Cpu, Kind::Gpu, Kind::Hybrid, Kind::ExpertCache];

impl Kind {
    fn request(self) -> GpuRequest {
        match self {
            Kind::Cpu => request(0),
            Kind::Gpu => request(-1),
            Kind::Hybrid => request(1),
            Kind::ExpertCache => GpuRequest {
                moe_cache: Some(CacheSize::Slots(16)),
                ..request(-1)
            },
        }
    }
}

/// The two models: a tiny llama made in memory, the synthetic Qwen3-MoE.
struct Models {
    llama: Arc<Model>,
    moe: Arc<Model>,
}

impl Models {
    fn of(&self, kind: Kind) -> &Arc<Model> {
        match kind {
            Kind::ExpertCache => &self.moe,
            _ => &self.llama,
        }
    }
}

/// Opens a session of `kind`, runs a 9-token prefill and two decode
/// steps, and returns every logit; fails on any validation message. The
/// session is dropped on return.
fn run(models: &Models, kind: Kind) -> Vec<f32> {
    let m = models.of(kind);
    let vocab = m.hparams().n_vocab as u32;
    let toks: Vec<u32> = (0..9).map(|i| (7 + 37 * i) % vocab).collect();
    let cfg = SessionConfig::default();
    let (mut s, plan) = Session::on_devices(Arc::clone(m), &kind.request(), &cfg)
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    let mut out = s.forward(&toks, Outputs::All, None).unwrap().to_vec();
    for t in [3, vocab - 1] {
        out.extend_from_slice(s.decode(t).unwrap());
    }
    let msgs = s.devices().validation_messages();
    assert!(msgs.is_empty(), "{kind:?} ({plan}): {msgs:?}");
    out
}

#[test]
fn sessions_of_every_kind_run_concurrently_and_agree_with_running_alone() {
    let models = Arc::new(Models {
        llama: Tiny::llama().model(),
        moe: load(&model_path("synth-qwen3moe.gguf")),
    });
    // What each kind gives alone, one after the other.
    let alone: Arc<Vec<Vec<f32>>> = Arc::new(KINDS.iter().map(|&k| run(&models, k)).collect());

    // Then THREADS threads, each running ROUNDS sessions of rotating kinds,
    // all starting together so that creations and drops overlap.
    let start = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (models, alone, start) =
                (Arc::clone(&models), Arc::clone(&alone), Arc::clone(&start));
            thread::Builder::new()
                .name(format!("sessions-{t}"))
                .spawn(move || {
                    start.wait();
                    for round in 0..ROUNDS {
                        let i = (t + round) % KINDS.len();
                        let got = run(&models, KINDS[i]);
                        // Bit for bit: a race that mixed up two sessions'
                        // buffers or bindings would show here.
                        assert!(
                            got.len() == alone[i].len()
                                && got
                                    .iter()
                                    .zip(&alone[i])
                                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "thread {t} round {round}: {:?} differs from running alone",
                            KINDS[i]
                        );
                    }
                })
                .expect("spawn")
        })
        .collect();
    let failed: Vec<String> = workers
        .into_iter()
        .enumerate()
        .filter_map(|(t, w)| w.join().err().map(|e| format!("thread {t}: {e:?}")))
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}

#[test]
fn what_the_contract_says_is_shared_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Model>();
    send_sync::<engine::vulkan::Context>();
    send_sync::<engine::chat::ChatTemplate>();
    send::<Session>();
    send::<engine::vulkan::VulkanBackend>();
    send::<engine::cpu::CpuBackend>();
}
