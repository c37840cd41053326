//! CPU attention over the KV cache: one decode row and a 64-row prefill
//! chunk at several depths, for SmolLM2-135M's and Gemma-3-270M's head
//! shapes, with f32 and f16 caches, in both numerics (`ggml`, the
//! default, and `reference`).
//!
//! `cargo bench -p engine --bench cpu_attention [-- --quick] [--threads 1,2]
//! [--only WORD,...]` (`--only`: the lines whose shape, cache type,
//! numerics, depth or query rows (`x1`, `x64`) are all among the words,
//! e.g. `--only smollm2,f32,ggml,x1`).
//!
//! Times are the fastest call of many (the machines are shared). GB/s
//! counts the cache bytes a call reads once (K and V of every visible
//! position); GFLOP/s counts 2 (dk + dv) per query head and position.

mod support;
use support::{in_pool, Flags};

use engine::cpu::{attention, CpuNumerics, KvStore};
use engine::ops::{AttnParams, KvType};
use engine::threads::Threads;

struct Shape {
    name: &'static str,
    n_head: usize,
    n_kv_head: usize,
    head_dim: usize,
}

const SHAPES: [Shape; 2] = [
    Shape {
        name: "smollm2",
        n_head: 9,
        n_kv_head: 3,
        head_dim: 64,
    },
    Shape {
        name: "gemma3",
        n_head: 4,
        n_kv_head: 1,
        head_dim: 256,
    },
];

fn main() {
    let flags = Flags::parse();
    // `--only a,b`: every word must name the line's shape, type, numerics,
    // depth or rows.
    let only: Vec<String> = flags
        .args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| flags.args.get(i + 1))
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    println!(
        "{:<8} {:<4} {:<9} {:>2} {:>6} {:>4} | {:>9} {:>7} {:>8}",
        "shape", "kv", "numerics", "t", "depth", "rows", "us", "GB/s", "GFLOP/s"
    );
    for &threads in &flags.threads {
        let pool = Threads::new(threads).expect("a thread pool");
        for s in &SHAPES {
            for ty in [KvType::F32, KvType::F16] {
                for depth in [512usize, 2048, 8192] {
                    for (rows, numerics) in [1usize, 64]
                        .into_iter()
                        .flat_map(|r| [CpuNumerics::Ggml, CpuNumerics::Reference].map(|n| (r, n)))
                    {
                        let ty_name = format!("{ty:?}").to_lowercase();
                        let (depth_name, rows_name) = (depth.to_string(), format!("x{rows}"));
                        let words = [s.name, &ty_name, numerics.name(), &depth_name, &rows_name];
                        if !only.iter().all(|w| words.contains(&w.as_str())) {
                            continue;
                        }
                        let n_ctx = depth + rows;
                        let (kw, dk) = (s.n_kv_head * s.head_dim, s.head_dim);
                        let mut kv = KvStore::new(n_ctx, kw, kw, ty).expect("cache memory");
                        let vals: Vec<f32> = (0..n_ctx * kw)
                            .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
                            .collect();
                        kv.write(0, &vals, &vals);
                        let q: Vec<f32> = (0..rows * s.n_head * dk)
                            .map(|i| ((i * 104_729) % 2001) as f32 / 2000.0 - 0.5)
                            .collect();
                        let mut out = vec![0.0f32; rows * s.n_head * dk];
                        let p = AttnParams {
                            n_head: s.n_head,
                            n_kv_head: s.n_kv_head,
                            head_dim_k: dk,
                            head_dim_v: dk,
                            scale: 1.0 / (dk as f32).sqrt(),
                            window: None,
                            softcap: None,
                        };
                        let t = in_pool(&pool, flags.budget, |_| {
                            attention(&kv, &q, &mut out, depth, &p, numerics)
                        });
                        let el = match ty {
                            KvType::F32 => 4.0,
                            KvType::F16 => 2.0,
                        };
                        let positions = (depth + rows) as f64;
                        let bytes = positions * 2.0 * kw as f64 * el;
                        let flop = rows as f64 * s.n_head as f64 * positions * 4.0 * dk as f64;
                        println!(
                            "{:<8} {:<4} {:<9} {:>2} {:>6} {:>4} | {:>9.1} {:>7.1} {:>8.1}",
                            s.name,
                            ty_name,
                            numerics,
                            threads,
                            depth,
                            rows,
                            t * 1e6,
                            bytes / t / 1e9,
                            flop / t / 1e9
                        );
                    }
                }
            }
        }
    }
}
