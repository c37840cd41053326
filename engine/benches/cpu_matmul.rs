//! CPU matrix kernels: matvec (decode) and matmul (prefill) throughput for
//! SmolLM2-135M's shapes, against the memory-bandwidth floor.
//!
//! `cargo bench -p engine --bench cpu_matmul [-- --quick] [--simd avx2] [--threads 1,2]`
//!
//! Times are the fastest call of many (the machines are shared). "hot"
//! runs one matrix over and over (it sits in cache after the first
//! call); "cold" rotates through copies that together pass 256 MiB, so the
//! weights come from memory each call, as in decode. GB/s counts weight
//! bytes; GFLOP/s counts 2 * rows * cols (* tokens). The floor is the time
//! to read the weights once at the single-thread bandwidth measured on this
//! machine kind (35.7 GB/s, ../shared/notes/performance.md).

use std::time::Duration;

mod support;
use support::{in_pool, Flags};

use engine::cpu::{matmul, matvec, SimdLevel, WeightView};
use engine::threads::Threads;
use engine::GgmlType;

const FLOOR_GBS: f64 = 35.7;
const COLD_BYTES: usize = 256 << 20;
const PREFILL_TOKENS: usize = 128;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Random blocks with small normal f16 scales (timing does not depend on
/// the values, but subnormals could).
fn weights(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let bb = ty.block_bytes();
    let mut w: Vec<u8> = (0..rows * cols / ty.block_elems() * bb)
        .map(|_| rng.next() as u8)
        .collect();
    let fields: &[usize] = match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    };
    for b in w.chunks_exact_mut(bb) {
        for &f in fields {
            b[f..f + 2].copy_from_slice(&0x2000u16.to_le_bytes());
        }
    }
    w
}

struct Shape {
    name: &'static str,
    rows: usize,
    cols: usize,
}

const SHAPES: [Shape; 4] = [
    Shape {
        name: "attn q/o",
        rows: 576,
        cols: 576,
    },
    Shape {
        name: "ffn gate/up",
        rows: 1536,
        cols: 576,
    },
    Shape {
        name: "ffn down",
        rows: 576,
        cols: 1536,
    },
    Shape {
        name: "head",
        rows: 49152,
        cols: 576,
    },
];

fn main() {
    let flags = Flags::parse();
    let simd = flags
        .args
        .iter()
        .position(|a| a == "--simd")
        .and_then(|i| flags.args.get(i + 1))
        .map(|n| SimdLevel::from_name(n).expect("--simd scalar|avx2|avx512vnni"))
        .unwrap_or_else(SimdLevel::detected);
    let (counts, budget) = (&flags.threads, flags.budget);
    let mut rng = Rng(0x5EED);
    println!("simd level: {simd}; floor: weights read once at {FLOOR_GBS} GB/s; prefill: {PREFILL_TOKENS} tokens");
    println!(
        "{:<6} {:<12} {:>12} {:>2} | {:>8} {:>6} {:>7} | {:>8} {:>6} {:>7} {:>6} | {:>8} {:>7} {:>7}",
        "type", "shape", "rows x cols", "t", "hot us", "GB/s", "GFLOP/s", "cold us", "GB/s", "GFLOP/s", "floor", "pre ms", "GFLOP/s", "tok/s"
    );
    for &threads in counts {
        let pool = Threads::with_simd(threads, simd).expect("a supported level");
        for ty in [
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q5_0,
        ] {
            for s in &SHAPES {
                if s.name == "head" && ty != GgmlType::Q8_0 {
                    continue;
                }
                let cols = s.cols.div_ceil(ty.block_elems()) * ty.block_elems();
                let w = weights(&mut rng, ty, s.rows, cols);
                let bytes = w.len();
                let copies = (COLD_BYTES / bytes).clamp(1, 256);
                let cold: Vec<Vec<u8>> = (0..copies)
                    .map(|_| weights(&mut rng, ty, s.rows, cols))
                    .collect();
                let x: Vec<f32> = (0..cols * PREFILL_TOKENS)
                    .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
                    .collect();
                let mut y = vec![0.0f32; s.rows * PREFILL_TOKENS];
                let hot = in_pool(&pool, budget, |_| {
                    matvec(
                        &pool,
                        WeightView::new(ty, s.rows, cols, &w).unwrap(),
                        &x[..cols],
                        &mut y[..s.rows],
                    )
                    .unwrap()
                });
                let cold_t = in_pool(&pool, budget, |i| {
                    matvec(
                        &pool,
                        WeightView::new(ty, s.rows, cols, &cold[i % copies]).unwrap(),
                        &x[..cols],
                        &mut y[..s.rows],
                    )
                    .unwrap()
                });
                let pre = in_pool(&pool, budget, |_| {
                    matmul(
                        &pool,
                        WeightView::new(ty, s.rows, cols, &w).unwrap(),
                        &x,
                        &mut y,
                    )
                    .unwrap()
                });
                let flop = 2.0 * (s.rows * cols) as f64;
                let floor = bytes as f64 / (FLOOR_GBS * 1e9);
                println!(
                    "{:<6} {:<12} {:>5} x {:>4} {:>2} | {:>8.1} {:>6.1} {:>7.1} | {:>8.1} {:>6.1} {:>7.1} {:>5.0}% | {:>8.2} {:>7.1} {:>7.0}",
                    ty.name(),
                    s.name,
                    s.rows,
                    cols,
                    threads,
                    hot * 1e6,
                    bytes as f64 / hot / 1e9,
                    flop / hot / 1e9,
                    cold_t * 1e6,
                    bytes as f64 / cold_t / 1e9,
                    flop / cold_t / 1e9,
                    100.0 * floor / cold_t,
                    pre * 1e3,
                    flop * PREFILL_TOKENS as f64 / pre / 1e9,
                    PREFILL_TOKENS as f64 / pre,
                );
            }
        }
        smollm2_token(&pool, &mut rng, budget);
    }
}

/// One SmolLM2-135M decode step's matrix-vector products (30 layers of
/// Q4_1 q, k, v, o, gate, up, down, then the Q8_0 head), each matrix its own
/// memory: the ceiling the matvecs alone put on decode speed.
fn smollm2_token(pool: &Threads, rng: &mut Rng, budget: Duration) {
    let layer = [
        (576, 576),
        (192, 576),
        (192, 576),
        (576, 576),
        (1536, 576),
        (1536, 576),
        (576, 1536),
    ];
    let mut mats: Vec<(GgmlType, usize, usize, Vec<u8>)> = Vec::new();
    for _ in 0..30 {
        for &(r, c) in &layer {
            mats.push((GgmlType::Q4_1, r, c, weights(rng, GgmlType::Q4_1, r, c)));
        }
    }
    mats.push((
        GgmlType::Q8_0,
        49152,
        576,
        weights(rng, GgmlType::Q8_0, 49152, 576),
    ));
    let bytes: usize = mats.iter().map(|m| m.3.len()).sum();
    let x = vec![0.5f32; 1536];
    let mut y = vec![0.0f32; 49152];
    let t = in_pool(pool, budget.max(Duration::from_millis(500)), |_| {
        for (ty, r, c, w) in &mats {
            let v = WeightView::new(*ty, *r, *c, w).unwrap();
            matvec(pool, v, &x[..*c], &mut y[..*r]).unwrap();
        }
    });
    println!(
        "smollm2-135m token ({} threads): {} matvecs, {:.1} MB, {:.2} ms -> {:.0} tokens/s from matvecs alone ({:.1} GB/s; floor {:.2} ms)",
        pool.count(),
        mats.len(),
        bytes as f64 / 1e6,
        t * 1e3,
        1.0 / t,
        bytes as f64 / t / 1e9,
        bytes as f64 / (FLOOR_GBS * 1e9) * 1e3,
    );
}
