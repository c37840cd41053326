//! `shaders/attention_combine_rows.comp`, which weighs the runs of keys of
//! the cooperative-matrix prefill attention together, against the same sums
//! on the CPU. The kernel before it needs cooperative matrices (tested on
//! a device that has them: `vulkan_attention.rs`); this one runs on every
//! device, lavapipe included: runs that saw no key (max -inf, sum 0), a
//! row that no run saw a key of (NaN, as the one-run kernels give), an
//! output offset, and the words around the output left as they were.

use crate::vulkan_support;

use engine::vulkan::{shaders, CombinePush, Context, ContextOptions};
use vulkan_support::{nmse, values};

/// Partials of `runs` runs for `rows` (row, head) pairs of `dv`: O
/// `[runs, rows, dv]` then (m, l) `[runs, rows, 2]`.
struct Partials {
    rows: usize,
    dv: usize,
    runs: usize,
    words: Vec<f32>,
}

impl Partials {
    fn ml_at(&self) -> usize {
        self.runs * self.rows * self.dv
    }

    /// out = (sum_s w_s O_s) * (1 / sum_s w_s l_s), w_s = exp(m_s - max m)
    /// (0 where m_s = -inf), the runs in order: the shader's sums.
    fn combine(&self) -> Vec<f32> {
        let (rows, dv, ml) = (self.rows, self.dv, self.ml_at());
        let m = |s: usize, th: usize| self.words[ml + 2 * (s * rows + th)];
        let l = |s: usize, th: usize| self.words[ml + 2 * (s * rows + th) + 1];
        let mut out = vec![0.0f32; rows * dv];
        for th in 0..rows {
            let mx = (0..self.runs).fold(f32::NEG_INFINITY, |a, s| a.max(m(s, th)));
            let w: Vec<f32> = (0..self.runs)
                .map(|s| {
                    if m(s, th) == f32::NEG_INFINITY {
                        0.0
                    } else {
                        (m(s, th) - mx).exp()
                    }
                })
                .collect();
            let sum: f32 = (0..self.runs).fold(0.0, |a, s| a + l(s, th) * w[s]);
            for d in 0..dv {
                let acc = (0..self.runs).fold(0.0f32, |a, s| {
                    a + self.words[(s * rows + th) * dv + d] * w[s]
                });
                out[th * dv + d] = acc * (1.0 / sum);
            }
        }
        out
    }
}

/// Random partials: O in [-1, 1] times the run's sum, m in [-4, 4], l in
/// [1, 9]; run `s` of pair `th` saw no key where `empty(s, th)`.
fn partials(
    seed: u64,
    (rows, dv, runs): (usize, usize, usize),
    empty: impl Fn(usize, usize) -> bool,
) -> Partials {
    let o = values(seed, runs * rows * dv);
    let r = values(seed + 1, 2 * runs * rows);
    let mut words = Vec::with_capacity(runs * rows * (dv + 2));
    words.extend_from_slice(&o);
    for s in 0..runs {
        for th in 0..rows {
            let i = 2 * (s * rows + th);
            let (m, l) = if empty(s, th) {
                (f32::NEG_INFINITY, 0.0)
            } else {
                (4.0 * r[i], 5.0 + 4.0 * r[i + 1])
            };
            words.push(m);
            words.push(l);
        }
    }
    for s in 0..runs {
        for th in 0..rows {
            let l = words[runs * rows * dv + 2 * (s * rows + th) + 1];
            for d in 0..dv {
                words[(s * rows + th) * dv + d] *= l;
            }
        }
    }
    Partials {
        rows,
        dv,
        runs,
        words,
    }
}

#[test]
fn runs_of_keys_weighed_together_match_the_cpu() {
    let ctx = Context::new(&ContextOptions {
        validation: true,
        device: vulkan_support::device(),
    })
    .expect("a Vulkan context with validation (run scripts/setup)");
    // 37 rows of 3 heads of 48 in 5 runs; the first rows saw nothing of the
    // last runs (the causal mask), pair 4 nothing of any run.
    let (t, nh, dv, runs) = (37usize, 3usize, 48usize, 5usize);
    let rows = t * nh;
    let p = partials(900, (rows, dv, runs), |s, th| {
        th == 4 || (th < 3 * nh && s >= 2) || (th % 7 == 0 && s == 0)
    });
    let want = p.combine();
    assert!(want[4 * dv..5 * dv].iter().all(|x| x.is_nan()));
    assert!(want.iter().filter(|x| x.is_finite()).count() == (rows - 1) * dv);

    const OFFSET: usize = 13;
    const SENTINEL: f32 = 12345.5;
    let n_out = OFFSET + rows * dv + 29;
    let part = ctx
        .storage_buffer::<f32>("partials", p.words.len())
        .unwrap();
    let out = ctx.storage_buffer::<f32>("out", n_out).unwrap();
    ctx.upload(&part, 0, &p.words).unwrap();
    ctx.upload(&out, 0, &vec![SENTINEL; n_out]).unwrap();
    let pipeline = ctx.pipeline(&shaders::ATTENTION_COMBINE_ROWS).unwrap();
    let push = CombinePush {
        n_rows: t as u32,
        n_head: nh as u32,
        head_dim_v: dv as u32,
        n_split: runs as u32,
        out_offset: OFFSET as u32,
        ml_at: p.ml_at() as u32,
    };
    let groups = pipeline.groups_for((rows * dv) as u64).unwrap();
    let mut sub = ctx.submission().unwrap();
    sub.dispatch(pipeline, &[&part, &out], &push, groups)
        .unwrap();
    sub.submit_and_wait().unwrap();
    drop(sub);
    let got: Vec<f32> = ctx.download_vec(&out, 0, n_out).unwrap();

    assert!(
        got[..OFFSET].iter().all(|&x| x == SENTINEL),
        "before the output"
    );
    assert!(
        got[OFFSET + rows * dv..].iter().all(|&x| x == SENTINEL),
        "after the output"
    );
    let got = &got[OFFSET..OFFSET + rows * dv];
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        assert_eq!(w.is_nan(), g.is_nan(), "element {i}: want {w}, got {g}");
    }
    let finite = |v: &[f32]| -> Vec<f32> { v.iter().copied().filter(|x| !x.is_nan()).collect() };
    // The same sums in the same order; only exp's ulps differ (lavapipe:
    // 0 or ~1e-15).
    let e = nmse(&finite(&want), &finite(got));
    eprintln!(
        "combine: NMSE {e:.2e} over {} finite outputs",
        finite(got).len()
    );
    assert!(e <= 1e-12, "NMSE {e:e}");

    let messages = ctx.validation_messages();
    assert!(messages.is_empty(), "validation: {messages:?}");
}
