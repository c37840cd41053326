//! Prefill and decode speed on the real models (ignored by default: run
//! with `cargo test --release -p engine --test model_speed -- --ignored
//! --nocapture`). Prints tokens per second; asserts nothing about speed.

use crate::model_support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        let (t, c) = (Instant::now(), cpu_time());
        let mut next = argmax(s.prefill(&prompt).unwrap());
        let (prefill, prefill_cpu) = (t.elapsed().as_secs_f64(), (cpu_time() - c).as_secs_f64());
        let (t, c) = (Instant::now(), cpu_time());
        for _ in 0..n_decode {
            next = argmax(s.decode(next).unwrap());
        }
        let (decode, decode_cpu) = (t.elapsed().as_secs_f64(), (cpu_time() - c).as_secs_f64());
        println!(
            "{file}, {threads} thread(s): prefill {n_prompt} tokens {:.1} t/s ({:.1} per CPU-second), \
             decode {n_decode} tokens {:.1} t/s ({:.1} per CPU-second)",
            n_prompt as f64 / prefill,
            n_prompt as f64 / prefill_cpu,
            n_decode as f64 / decode,
            n_decode as f64 / decode_cpu,
        );
    }
}

/// CPU time of the whole process (user + system), from /proc/self/stat: on a
/// shared machine wall time also counts other processes' turns, CPU time
/// does not (for one thread, tokens per CPU-second is the uncontended rate).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which is in parentheses): utime is the
    // 14th field of the line, stime the 15th, in clock ticks (100 per second).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(2)
        .map(|v| v.parse().unwrap())
        .collect();
    Duration::from_millis((f[0] + f[1]) * 10)
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
