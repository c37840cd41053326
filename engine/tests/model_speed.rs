//! Prefill and decode speed on the real models (ignored by default: run
//! with `cargo test --release -p engine --test model_speed -- --ignored
//! --nocapture`). Prints tokens per second; asserts nothing about speed.

mod model_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use engine::model::Model;
use engine::session::{Session, SessionConfig};
use model_support::gguf_support::{model_path, GEMMA3, SMOLLM2};

fn measure(file: &str, n_prompt: usize, n_decode: usize) {
    let m = Arc::new(Model::load(Path::new(&model_path(file))).unwrap());
    let vocab = m.hparams().n_vocab as u64;
    let prompt: Vec<u32> = (0..n_prompt as u64)
        .map(|i| ((i * 7919 + 1000) % vocab) as u32)
        .collect();
    for threads in [1, 2] {
        let cfg = SessionConfig {
            threads,
            ..SessionConfig::default()
        };
        let mut s = Session::new(Arc::clone(&m), &cfg).unwrap();
        let t = Instant::now();
        let mut next = argmax(s.prefill(&prompt).unwrap());
        let prefill = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..n_decode {
            next = argmax(s.decode(next).unwrap());
        }
        let decode = t.elapsed().as_secs_f64();
        println!(
            "{file}, {threads} thread(s): prefill {n_prompt} tokens {:.1} t/s, decode {n_decode} tokens {:.1} t/s",
            n_prompt as f64 / prefill,
            n_decode as f64 / decode
        );
    }
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
#[ignore = "speed measurement; run in release with --ignored --nocapture"]
fn smollm2_speed() {
    measure(SMOLLM2, 128, 32);
}

#[test]
#[ignore = "speed measurement; run in release with --ignored --nocapture"]
fn gemma3_speed() {
    measure(GEMMA3, 128, 32);
}
