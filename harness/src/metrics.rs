//! Pure comparison metrics between a reference `a` and a candidate `b`:
//! tensors (NMSE, max abs, cosine; llama.cpp's test-backend-ops
//! conventions), next-token distributions (KL divergence over a top-k
//! support with a tail bucket, top-1 agreement) and order statistics as
//! llama.cpp's `perplexity --kl-divergence` reports them.

/// Normalised mean squared error: sum((a-b)^2) / sum(a^2).
/// NaN anywhere gives NaN (so every limit check fails); a zero reference with
/// a non-zero candidate gives +inf; two all-zero vectors give 0.
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "nmse: length mismatch");
    let mut err = 0.0f64;
    let mut norm = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        if x.is_nan() || y.is_nan() {
            return f64::NAN;
        }
        let d = x as f64 - y as f64;
        err += d * d;
        norm += (x as f64) * (x as f64);
    }
    if err == 0.0 {
        0.0
    } else if norm == 0.0 {
        f64::INFINITY
    } else {
        err / norm
    }
}

/// Largest absolute elementwise difference (NaN if either side has a NaN).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "max_abs_diff: length mismatch");
    let mut m = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        if x.is_nan() || y.is_nan() {
            return f64::NAN;
        }
        m = m.max((x as f64 - y as f64).abs());
    }
    m
}

/// Cosine similarity; 1.0 for two zero vectors, 0.0 when exactly one is zero.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "cosine: length mismatch");
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    match (aa == 0.0, bb == 0.0) {
        (true, true) => 1.0,
        (true, false) | (false, true) => 0.0,
        _ => ab / (aa.sqrt() * bb.sqrt()),
    }
}

/// Number of positions whose f32 bit patterns differ.
pub fn bit_mismatches(a: &[f32], b: &[f32]) -> usize {
    assert_eq!(a.len(), b.len(), "bit_mismatches: length mismatch");
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count()
}

/// Index of the largest value, the lowest index among equal maxima (how
/// llama.cpp's greedy sampler and the capture's top-k order break ties).
/// NaN never wins; `None` for an empty slice or one of NaNs only.
pub fn argmax(v: &[f32]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &x) in v.iter().enumerate() {
        if x.is_nan() {
            continue;
        }
        if best.is_none_or(|b| x > v[b]) {
            best = Some(i);
        }
    }
    best
}

/// log(sum(exp(x))) in f64 (NaN if any input is NaN).
pub fn log_sum_exp(x: &[f32]) -> f64 {
    let mut max = f64::NEG_INFINITY;
    for &v in x {
        if v.is_nan() {
            return f64::NAN;
        }
        max = max.max(v as f64);
    }
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = x.iter().map(|&v| (v as f64 - max).exp()).sum();
    max + sum.ln()
}

/// The reference's next-token distribution at one position as the capture
/// stores it: its `k` highest logits (`ids`, `logits`) and the log-sum-exp
/// `lse` of all its logits.
#[derive(Clone, Copy, Debug)]
pub struct TopK<'a> {
    pub ids: &'a [i32],
    pub logits: &'a [f32],
    pub lse: f32,
}

/// KL(P‖Q) in nats, P the reference's next-token distribution, Q ours
/// (`ours`: every logit), over a partition of the vocabulary into k + 1
/// events: each of the reference's top-k tokens, and one bucket holding
/// every other token.
///
/// - P of a top-k token is `exp(logit - lse)`; P of the bucket is
///   `1 - sum` of those, clamped at 0 (the capture's f32-rounded `lse`
///   makes the top-k sum uncertain by about 1e-7 · |lse|).
/// - Q of a top-k token is our softmax of that token; Q of the bucket is
///   our softmax summed over every token outside the reference's top-k
///   (summed directly, not as 1 - the rest).
/// - Terms with P = 0 are 0; P > 0 where Q = 0 gives +inf; NaN anywhere
///   gives NaN.
///
/// Merging tokens into one event never increases a KL divergence (the
/// log-sum inequality), so this is a lower bound of the full-vocabulary
/// KLD that llama.cpp's `perplexity --kl-divergence` computes, equal to it
/// when P and Q split the tail bucket in the same proportions. With k = 64
/// the bucket's mass is usually tiny, so the bound is tight. Rounding can
/// make a value slightly negative (llama.cpp reports such values too).
pub fn kld_top_k(reference: TopK<'_>, ours: &[f32]) -> f64 {
    assert_eq!(
        reference.ids.len(),
        reference.logits.len(),
        "kld_top_k: top-k lengths"
    );
    let lse_p = reference.lse as f64;
    let lse_q = log_sum_exp(ours);
    if lse_p.is_nan() || lse_q.is_nan() || reference.logits.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    let mut top: Vec<usize> = reference.ids.iter().map(|&i| i as usize).collect();
    assert!(
        top.iter().all(|&i| i < ours.len()),
        "kld_top_k: a top-k id is outside the vocabulary"
    );
    top.sort_unstable();
    top.dedup();
    assert_eq!(
        top.len(),
        reference.ids.len(),
        "kld_top_k: repeated top-k id"
    );

    let term = |log_p: f64, log_q: f64| -> f64 {
        if log_p == f64::NEG_INFINITY {
            0.0
        } else if log_q == f64::NEG_INFINITY {
            f64::INFINITY
        } else {
            log_p.exp() * (log_p - log_q)
        }
    };
    let mut kld = 0.0;
    let mut p_top = 0.0;
    for (&id, &v) in reference.ids.iter().zip(reference.logits) {
        let log_p = v as f64 - lse_p;
        p_top += log_p.exp();
        kld += term(log_p, ours[id as usize] as f64 - lse_q);
    }
    // Our mass outside the reference's top-k, summed over the complement.
    let mut q_tail = 0.0;
    let mut next = top.iter().copied().peekable();
    for (j, &x) in ours.iter().enumerate() {
        if next.peek() == Some(&j) {
            next.next();
            continue;
        }
        q_tail += (x as f64 - lse_q).exp();
    }
    let p_tail = (1.0 - p_top).max(0.0);
    // The reference's tail is 1 minus its top-k mass, with its log-sum-exp
    // stored as f32: its top-k probabilities carry a common relative error
    // of up to half an ulp of `lse`, so a tail below that (plus the
    // rounding of the sum) is not resolved. When ours underflows to 0
    // there (a synthetic model's logits spread over hundreds of nats), the
    // term is 0, not infinite.
    let resolution = 0.5 * f64::from(ulp(reference.lse)) * p_top + 64.0 * f64::EPSILON;
    if q_tail == 0.0 && p_tail <= resolution {
        return kld;
    }
    kld + term(p_tail.ln(), q_tail.ln())
}

/// The distance from `x` to the next f32 away from zero.
fn ulp(x: f32) -> f32 {
    let a = x.abs();
    if !a.is_finite() {
        return f32::INFINITY;
    }
    f32::from_bits(a.to_bits() + 1) - a
}

/// Whether our most likely token is the reference's (its top-k row is
/// sorted, ties by lower id, as [`argmax`] breaks them).
pub fn top1_agrees(reference_top_id: i32, ours: &[f32]) -> bool {
    argmax(ours).is_some_and(|i| i as i64 == reference_top_id as i64)
}

/// The value at `fraction` (0..=1) of ascending `sorted`, interpolating
/// linearly between neighbours at position `fraction · (n - 1)`: llama.cpp
/// `perplexity`'s percentile. NaN for an empty slice.
pub fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if fraction <= 0.0 {
        return sorted[0];
    }
    if fraction >= 1.0 {
        return sorted[n - 1];
    }
    let p = fraction * (n - 1) as f64;
    let ip = p as usize;
    let f = p - ip as f64;
    (1.0 - f) * sorted[ip] + f * sorted[(ip + 1).min(n - 1)]
}

/// The middle of ascending `sorted` (mean of the two middle values for an
/// even count), as llama.cpp's perplexity reports it. NaN when empty.
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n.is_multiple_of(2) => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
        _ => sorted[n / 2],
    }
}

/// Summary of per-position values, as llama.cpp's `perplexity
/// --kl-divergence` prints its KLD statistics.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub count: usize,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub mean: f64,
    /// Standard error of the mean, `sqrt(var / (n - 1))` (llama.cpp's
    /// "±"; 0 for fewer than 2 values).
    #[serde(deserialize_with = "crate::nan::f64")]
    pub stderr: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub max: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub p99: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub p95: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub p90: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub median: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub min: f64,
}

/// [`Summary`] of `values` (any order). A NaN makes every field NaN.
pub fn summarize(values: &[f64]) -> Summary {
    let n = values.len();
    if n == 0 || values.iter().any(|v| v.is_nan()) {
        let nan = f64::NAN;
        return Summary {
            count: n,
            mean: nan,
            stderr: nan,
            max: nan,
            p99: nan,
            p95: nan,
            p90: nan,
            median: nan,
            min: nan,
        };
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
    Summary {
        count: n,
        mean,
        stderr: if n > 1 {
            (var / (n - 1) as f64).sqrt()
        } else {
            0.0
        },
        max: sorted[n - 1],
        p99: percentile(&sorted, 0.99),
        p95: percentile(&sorted, 0.95),
        p90: percentile(&sorted, 0.90),
        median: median(&sorted),
        min: sorted[0],
    }
}

#[cfg(test)]
mod tests {
    fn top_k_of(logits: &[f32], k: usize) -> (Vec<i32>, Vec<f32>, f32) {
        crate::reference::arrays::top_k_lse(logits, k)
    }

    /// Full-vocabulary KL(P‖Q) in f64, for checking the top-k version.
    fn kld_full(p: &[f32], q: &[f32]) -> f64 {
        let (lp, lq) = (log_sum_exp(p), log_sum_exp(q));
        p.iter()
            .zip(q)
            .map(|(&a, &b)| {
                let la = a as f64 - lp;
                la.exp() * (la - (b as f64 - lq))
            })
            .sum()
    }

    #[test]
    fn an_unresolved_reference_tail_against_an_empty_one_is_not_infinite() {
        // Logits hundreds of nats apart: every tail probability underflows
        // in f64 on our side, and the reference's tail is rounding noise.
        let mut p = vec![-900.0f32; 100];
        p[0] = 300.0;
        p[1] = 299.0;
        let (ids, vals, lse) = top_k_of(&p, 2);
        let got = kld_top_k(
            TopK {
                ids: &ids,
                logits: &vals,
                lse,
            },
            &p,
        );
        // What is left is the f32 log-sum-exp's rounding (half an ulp of
        // 300.3 is 1.5e-5): measured -1.25e-6.
        assert!(got.is_finite() && got.abs() < 2e-5, "{got}");
        // A real tail where ours has none is still infinite.
        let mut q = p.clone();
        for v in q.iter_mut().skip(2) {
            *v = -2000.0;
        }
        let mut p2 = p.clone();
        p2[5] = 299.0;
        let (ids, vals, lse) = top_k_of(&p2, 2);
        let got = kld_top_k(
            TopK {
                ids: &ids,
                logits: &vals,
                lse,
            },
            &q,
        );
        assert!(got.is_infinite(), "{got}");
    }

    #[test]
    fn kld_known_values() {
        // Two tokens, k = 1: the tail bucket is the other token, so the
        // partition is the whole vocabulary and the value is exact.
        // P = (0.5, 0.5), Q = (0.8, 0.2): 0.5 ln(0.5/0.8) + 0.5 ln(0.5/0.2).
        let p = [0.0f32, 0.0];
        let q = [(0.8f32).ln(), (0.2f32).ln()];
        let (ids, vals, lse) = top_k_of(&p, 1);
        let got = kld_top_k(
            TopK {
                ids: &ids,
                logits: &vals,
                lse,
            },
            &q,
        );
        let want = 0.5 * (0.5f64 / 0.8).ln() + 0.5 * (0.5f64 / 0.2).ln();
        assert!((got - want).abs() < 1e-7, "{got} vs {want}");
        // Identical distributions: 0 (up to the f32 lse).
        let (ids, vals, lse) = top_k_of(&q, 1);
        assert!(
            kld_top_k(
                TopK {
                    ids: &ids,
                    logits: &vals,
                    lse
                },
                &q
            )
            .abs()
                < 1e-7
        );
        // A shift of every logit changes nothing.
        let shifted: Vec<f32> = q.iter().map(|x| x + 3.0).collect();
        assert!(
            kld_top_k(
                TopK {
                    ids: &ids,
                    logits: &vals,
                    lse
                },
                &shifted
            )
            .abs()
                < 1e-6
        );
        // Our probability 0 where the reference has mass: +inf.
        let (ids, vals, lse) = top_k_of(&p, 1);
        let inf = kld_top_k(
            TopK {
                ids: &ids,
                logits: &vals,
                lse,
            },
            &[f32::NEG_INFINITY, 0.0],
        );
        assert_eq!(inf, f64::INFINITY);
        // NaN in ours: NaN.
        assert!(kld_top_k(
            TopK {
                ids: &ids,
                logits: &vals,
                lse
            },
            &[f32::NAN, 0.0]
        )
        .is_nan());
    }

    #[test]
    fn kld_tail_bucket_merges_the_tail() {
        // Reference: 3 top tokens and a tail of 5 tokens; ours moves mass
        // inside the tail only: the bucket hides that (0 up to rounding),
        // while the full KLD sees it.
        let p = [4.0f32, 3.0, 2.0, -1.0, -1.0, -1.0, -1.0, -1.0];
        let mut q = p;
        // e^-1 · (1.5 + 0.5) = 2 e^-1: the same tail mass, split otherwise.
        q[3] = -1.0 + 1.5f32.ln();
        q[4] = -1.0 + 0.5f32.ln();
        let (ids, vals, lse) = top_k_of(&p, 3);
        let got = kld_top_k(
            TopK {
                ids: &ids,
                logits: &vals,
                lse,
            },
            &q,
        );
        assert!(got.abs() < 1e-6, "bucketed {got}");
        assert!(kld_full(&p, &q) > 1e-3, "full {}", kld_full(&p, &q));
    }

    #[test]
    fn median_and_percentile_follow_llama_cpp() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(median(&v), 2.5);
        assert_eq!(median(&[1.0, 5.0, 9.0]), 5.0);
        assert!(median(&[]).is_nan());
        // p = fraction · (n - 1) = 0.5 · 3 = 1.5: halfway between 2 and 3.
        assert_eq!(percentile(&v, 0.5), 2.5);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 4.0);
        // 0.99 · 3 = 2.97: 0.03 · 3 + 0.97 · 4.
        assert!((percentile(&v, 0.99) - 3.97).abs() < 1e-12);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        let s = summarize(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!(
            (s.count, s.mean, s.max, s.min, s.median),
            (4, 2.5, 4.0, 1.0, 2.5)
        );
        // var = 1.25, stderr = sqrt(1.25 / 3)
        assert!((s.stderr - (1.25f64 / 3.0).sqrt()).abs() < 1e-12);
        assert!(summarize(&[1.0, f64::NAN]).mean.is_nan());
        assert_eq!(summarize(&[2.0]).stderr, 0.0);
    }

    #[test]
    fn argmax_and_top1_break_ties_by_lower_id() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), Some(1));
        assert_eq!(argmax(&[f32::NAN, 0.5]), Some(1));
        assert_eq!(argmax(&[]), None);
        assert!(top1_agrees(1, &[1.0, 3.0, 3.0]));
        assert!(!top1_agrees(2, &[1.0, 3.0, 3.0]));
        // The capture's top-k order agrees with argmax on ties.
        let (ids, _, _) = top_k_of(&[1.0, 3.0, 3.0], 2);
        assert_eq!(ids[0] as usize, argmax(&[1.0, 3.0, 3.0]).unwrap());
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nmse_known_values() {
        assert_eq!(nmse(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        // err = 1, norm = 1 + 4
        assert!((nmse(&[1.0, 2.0], &[1.0, 3.0]) - 0.2).abs() < 1e-12);
        assert!(nmse(&[0.0], &[1.0]).is_infinite());
        assert_eq!(nmse(&[0.0, 0.0], &[0.0, 0.0]), 0.0);
        assert!(nmse(&[1.0], &[f32::NAN]).is_nan());
    }

    #[test]
    fn cosine_and_max_abs_known_values() {
        assert!((cosine(&[1.0, 0.0], &[0.0, 1.0])).abs() < 1e-12);
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-12);
        assert!((cosine(&[1.0, 2.0], &[-1.0, -2.0]) + 1.0).abs() < 1e-12);
        assert_eq!(max_abs_diff(&[1.0, -2.0], &[1.5, -4.0]), 2.0);
        assert!(max_abs_diff(&[f32::NAN], &[0.0]).is_nan());
        assert_eq!(bit_mismatches(&[0.0, 1.0], &[-0.0, 1.0]), 1);
    }

    proptest! {
        #[test]
        fn nmse_is_scale_invariant_and_nonnegative(
            v in prop::collection::vec(-1.0f32..1.0, 1..64),
            noise in prop::collection::vec(-1e-3f32..1e-3, 64),
            // Powers of two scale f32 values (and so every square and sum
            // of the f64 computation) exactly: the NMSE must not move at
            // all. An arbitrary factor rounds the scaled values, which for
            // tiny differences moves the NMSE by more than any fixed
            // relative tolerance.
            k in prop::sample::select(vec![0.125f32, 0.5, 2.0, 4.0, 64.0]),
        ) {
            let w: Vec<f32> = v.iter().zip(&noise).map(|(x, n)| x + n).collect();
            let e1 = nmse(&v, &w);
            prop_assert!(e1 >= 0.0);
            let vs: Vec<f32> = v.iter().map(|x| x * k).collect();
            let ws: Vec<f32> = w.iter().map(|x| x * k).collect();
            let e2 = nmse(&vs, &ws);
            if e1.is_finite() && e1 > 0.0 {
                prop_assert_eq!(e1, e2);
            }
            prop_assert!(cosine(&v, &w) <= 1.0 + 1e-9);
        }
    }
}
