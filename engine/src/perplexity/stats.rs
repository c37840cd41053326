//! Running sums and the statistics llama-perplexity reports from them, with
//! its formulas: perplexity and its uncertainty, and with `--kl-divergence`
//! the PPL ratio and difference, KL divergence, Δp and top-1 agreement.

use super::position::PositionScore;

/// `(mean, uncertainty of the mean)` of `count` values from their sum and
/// sum of squares: `f = Σx/n`, `σ_f = sqrt((Σx²/n − f²)/(n − 1))`, with
/// `σ_f = 0` unless the variance is positive and `n > 10`; `(0, 0)` for
/// `n = 0`.
pub fn mean_and_uncertainty(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count < 1 {
        return (0.0, 0.0);
    }
    let n = count as f64;
    let f = sum / n;
    let var = sum2 / n - f * f;
    let df = if var > 0.0 && count > 10 {
        (var / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (f, df)
}

/// The covariance of the means of `a` and `b`:
/// `(Σab/n − (Σa/n)(Σb/n)) / (n − 1)`, 0 for `n < 10`.
pub fn covariance(sum_a: f64, sum_b: f64, sum_ab: f64, count: usize) -> f64 {
    if count < 10 {
        return 0.0;
    }
    let n = count as f64;
    (sum_ab / n - (sum_a / n) * (sum_b / n)) / (n - 1.0)
}

/// The `fraction` percentile of ascending `sorted` (not empty), linearly
/// interpolated in f32: `p = fraction · (n − 1)`, `i = ⌊p⌋`,
/// `(1 − (p − i)) · v[i] + (p − i) · v[min(i + 1, n − 1)]`; the first value
/// for `fraction ≤ 0`, the last for `fraction ≥ 1`.
pub fn percentile(sorted: &[f32], fraction: f32) -> f32 {
    if fraction <= 0.0 {
        return sorted[0];
    }
    if fraction >= 1.0 {
        return sorted[sorted.len() - 1];
    }
    let mut p = fraction * (sorted.len() - 1) as f32;
    let i = p as usize;
    p -= i as f32;
    (1.0 - p) * sorted[i] + p * sorted[(i + 1).min(sorted.len() - 1)]
}

/// The median of ascending `sorted` (not empty): the middle value, or
/// `0.5 · (a + b)` of the two middle ones (f32).
pub fn median(sorted: &[f32]) -> f32 {
    let n = sorted.len();
    if n.is_multiple_of(2) {
        0.5 * (sorted[n / 2] + sorted[n / 2 - 1])
    } else {
        sorted[n / 2]
    }
}

/// Negative log-likelihoods `v` of the scored positions so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PplSums {
    /// `Σ v`.
    pub nll: f64,
    /// `Σ v²`.
    pub nll2: f64,
    pub count: usize,
}

impl PplSums {
    pub fn add(&mut self, v: f64) {
        self.nll += v;
        self.nll2 += v * v;
        self.count += 1;
    }

    /// The running estimate `PPL = exp(Σv / n)`.
    pub fn ppl(&self) -> f64 {
        (self.nll / self.count as f64).exp()
    }

    /// The final estimate `(PPL, σ_PPL)`: with `μ = Σv/n` and
    /// `σ_μ = sqrt((Σv²/n − μ²)/(n − 1))`, `PPL = exp μ`,
    /// `σ_PPL = PPL · σ_μ` (error propagation through exp). `None` when the
    /// variance is not positive (llama.cpp then prints an error line).
    pub fn estimate(&self) -> Option<(f64, f64)> {
        let n = self.count as f64;
        let mean = self.nll / n;
        let var = self.nll2 / n - mean * mean;
        if var > 0.0 {
            let ppl = mean.exp();
            Some((ppl, (var / (n - 1.0)).sqrt() * ppl))
        } else {
            None
        }
    }
}

/// Sums over the positions scored against a base (llama.cpp's
/// `kl_divergence_result`; products of two f32 are taken in f32).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KldSums {
    pub sum_nll: f64,
    pub sum_nll2: f64,
    pub sum_nll_base: f64,
    pub sum_nll_base2: f64,
    pub sum_nll_nll_base: f64,
    pub sum_kld: f64,
    pub sum_kld2: f64,
    pub sum_p_diff: f64,
    pub sum_p_diff2: f64,
    pub sum_p_diff4: f64,
    pub n_same_top: usize,
    pub count: usize,
}

impl KldSums {
    pub fn add(&mut self, s: &PositionScore) {
        self.sum_nll += f64::from(s.nll);
        self.sum_nll2 += f64::from(s.nll * s.nll);
        self.sum_nll_base += f64::from(s.nll_base);
        self.sum_nll_base2 += f64::from(s.nll_base * s.nll_base);
        self.sum_nll_nll_base += f64::from(s.nll * s.nll_base);
        self.sum_kld += s.kld;
        self.sum_kld2 += s.kld * s.kld;
        self.sum_p_diff += f64::from(s.p_diff);
        let p_diff2 = f64::from(s.p_diff * s.p_diff);
        self.sum_p_diff2 += p_diff2;
        self.sum_p_diff4 += p_diff2 * p_diff2;
        self.n_same_top += usize::from(s.same_top());
        self.count += 1;
    }

    /// `(ln PPL(Q), σ)`: mean and uncertainty of our NLLs.
    pub fn log_ppl(&self) -> (f64, f64) {
        mean_and_uncertainty(self.sum_nll, self.sum_nll2, self.count)
    }

    /// `(ln PPL(base), σ)`: of the base's NLLs.
    pub fn log_ppl_base(&self) -> (f64, f64) {
        mean_and_uncertainty(self.sum_nll_base, self.sum_nll_base2, self.count)
    }

    /// The covariance of the two mean NLLs.
    pub fn log_ppl_cov(&self) -> f64 {
        covariance(
            self.sum_nll,
            self.sum_nll_base,
            self.sum_nll_nll_base,
            self.count,
        )
    }

    /// `(ln(PPL(Q)/PPL(base)), σ)`: `μ_Q − μ_base`,
    /// `sqrt(σ_Q² + σ_base² − 2 cov)`.
    pub fn log_ppl_ratio(&self) -> (f64, f64) {
        let (q, dq) = self.log_ppl();
        let (b, db) = self.log_ppl_base();
        (q - b, (dq * dq + db * db - 2.0 * self.log_ppl_cov()).sqrt())
    }

    /// `(mean KLD, σ)`.
    pub fn kld(&self) -> (f64, f64) {
        mean_and_uncertainty(self.sum_kld, self.sum_kld2, self.count)
    }

    /// `(mean Δp, σ)`.
    pub fn p_diff(&self) -> (f64, f64) {
        mean_and_uncertainty(self.sum_p_diff, self.sum_p_diff2, self.count)
    }

    /// `(RMS Δp, σ)`: from `(m, σ_m)` = mean and uncertainty of Δp²,
    /// `RMS = sqrt m`, `σ = σ_m / (2 RMS)`.
    pub fn rms_p_diff(&self) -> (f64, f64) {
        let (m, dm) = mean_and_uncertainty(self.sum_p_diff2, self.sum_p_diff4, self.count);
        let rms = m.sqrt();
        (rms, 0.5 / rms * dm)
    }

    /// `(fraction of same top-1, σ)`: `f = same/n`,
    /// `σ = sqrt(f (1 − f) / (n − 1))` (binomial).
    pub fn same_top(&self) -> (f64, f64) {
        let n = self.count as f64;
        let f = self.n_same_top as f64 / n;
        (f, (f * (1.0 - f) / (n - 1.0)).sqrt())
    }
}

/// Everything llama-perplexity prints at the end of a `--kl-divergence`
/// run ("(x, σ)" pairs are a value and its uncertainty).
#[derive(Clone, Debug, PartialEq)]
pub struct KldSummary {
    /// `exp(μ_Q)`, `exp(μ_Q) · σ_Q`.
    pub ppl: (f64, f64),
    pub ppl_base: (f64, f64),
    /// `cov / (σ_Q σ_base)`.
    pub log_ppl_cor: f64,
    pub log_ppl_ratio: (f64, f64),
    /// `exp` of the log ratio, `ratio · σ_log ratio`.
    pub ppl_ratio: (f64, f64),
    /// `PPL(Q) − PPL(base)`,
    /// `sqrt(σ_PPL(Q)² + σ_PPL(base)² − 2 PPL(Q) PPL(base) cov)`.
    pub ppl_diff: (f64, f64),
    pub kld: (f64, f64),
    /// KLD at the maximum, 99.9, 99, 95, 90 percent, median, 10, 5, 1, 0.1
    /// percent and minimum (f32, as llama.cpp keeps them).
    pub kld_max: f32,
    pub kld_99_9: f32,
    pub kld_99: f32,
    pub kld_95: f32,
    pub kld_90: f32,
    pub kld_median: f32,
    pub kld_10: f32,
    pub kld_5: f32,
    pub kld_1: f32,
    pub kld_0_1: f32,
    pub kld_min: f32,
    pub p_diff: (f64, f64),
    /// Δp at the maximum, 99.9, 99, 95, 90, 75 percent, median, 25, 10, 5,
    /// 1, 0.1 percent and minimum.
    pub p_diff_max: f32,
    pub p_diff_99_9: f32,
    pub p_diff_99: f32,
    pub p_diff_95: f32,
    pub p_diff_90: f32,
    pub p_diff_75: f32,
    pub p_diff_median: f32,
    pub p_diff_25: f32,
    pub p_diff_10: f32,
    pub p_diff_5: f32,
    pub p_diff_1: f32,
    pub p_diff_0_1: f32,
    pub p_diff_min: f32,
    pub rms_p_diff: (f64, f64),
    pub same_top: (f64, f64),
    pub count: usize,
}

/// llama-perplexity prints no statistics over fewer positions than this.
pub const MIN_POSITIONS_FOR_STATISTICS: usize = 100;

impl KldSummary {
    /// The summary of `scores` (in any order) and their `sums`; `None` for
    /// fewer than [`MIN_POSITIONS_FOR_STATISTICS`] positions.
    pub fn new(sums: &KldSums, scores: &[PositionScore]) -> Option<KldSummary> {
        if sums.count < MIN_POSITIONS_FOR_STATISTICS || scores.is_empty() {
            return None;
        }
        let mut klds: Vec<f32> = scores.iter().map(|s| s.kld as f32).collect();
        let mut dps: Vec<f32> = scores.iter().map(|s| s.p_diff).collect();
        klds.sort_by(f32::total_cmp);
        dps.sort_by(f32::total_cmp);
        let (log_ppl, dlog_ppl) = sums.log_ppl();
        let (log_base, dlog_base) = sums.log_ppl_base();
        let cov = sums.log_ppl_cov();
        let ppl = (log_ppl.exp(), log_ppl.exp() * dlog_ppl);
        let ppl_base = (log_base.exp(), log_base.exp() * dlog_base);
        let log_ppl_ratio = sums.log_ppl_ratio();
        let ratio = log_ppl_ratio.0.exp();
        let ppl_cov = ppl.0 * ppl_base.0 * cov;
        let k = |f: f32| percentile(&klds, f);
        let d = |f: f32| percentile(&dps, f);
        Some(KldSummary {
            ppl,
            ppl_base,
            log_ppl_cor: cov / (dlog_ppl * dlog_base),
            log_ppl_ratio,
            ppl_ratio: (ratio, ratio * log_ppl_ratio.1),
            ppl_diff: (
                ppl.0 - ppl_base.0,
                (ppl.1 * ppl.1 + ppl_base.1 * ppl_base.1 - 2.0 * ppl_cov).sqrt(),
            ),
            kld: sums.kld(),
            kld_max: klds[klds.len() - 1],
            kld_99_9: k(0.999),
            kld_99: k(0.990),
            kld_95: k(0.950),
            kld_90: k(0.900),
            kld_median: median(&klds),
            kld_10: k(0.100),
            kld_5: k(0.050),
            kld_1: k(0.010),
            kld_0_1: k(0.001),
            kld_min: klds[0],
            p_diff: sums.p_diff(),
            p_diff_max: dps[dps.len() - 1],
            p_diff_99_9: d(0.999),
            p_diff_99: d(0.990),
            p_diff_95: d(0.950),
            p_diff_90: d(0.900),
            p_diff_75: d(0.750),
            p_diff_median: median(&dps),
            p_diff_25: d(0.250),
            p_diff_10: d(0.100),
            p_diff_5: d(0.050),
            p_diff_1: d(0.010),
            p_diff_0_1: d(0.001),
            p_diff_min: dps[0],
            rms_p_diff: sums.rms_p_diff(),
            same_top: sums.same_top(),
            count: sums.count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn mean_and_uncertainty_of_known_values() {
        // 1..=20: mean 10.5, population variance (n² − 1)/12 = 33.25,
        // uncertainty sqrt(33.25 / 19).
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        let (s, s2) = (xs.iter().sum(), xs.iter().map(|x| x * x).sum());
        let (f, df) = mean_and_uncertainty(s, s2, 20);
        assert!(close(f, 10.5, 1e-12));
        assert!(close(df, (33.25f64 / 19.0).sqrt(), 1e-12));
        // Ten values or fewer: no uncertainty.
        assert_eq!(mean_and_uncertainty(55.0, 385.0, 10), (5.5, 0.0));
        assert_eq!(mean_and_uncertainty(0.0, 0.0, 0), (0.0, 0.0));
    }

    #[test]
    fn covariance_of_known_values() {
        let a: Vec<f64> = (0..12).map(f64::from).collect();
        let b: Vec<f64> = a.iter().map(|x| 3.0 - 2.0 * x).collect();
        let sab = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let n = 12.0;
        // Population covariance of a and −2a is −2 var(a) = −2 (n² − 1)/12.
        let want = -2.0 * (n * n - 1.0) / 12.0 / (n - 1.0);
        let got = covariance(a.iter().sum(), b.iter().sum(), sab, 12);
        assert!(close(got, want, 1e-12), "{got} {want}");
        assert_eq!(covariance(1.0, 2.0, 3.0, 9), 0.0);
    }

    #[test]
    fn percentiles_interpolate_between_neighbours() {
        let v = [0.0f32, 10.0, 20.0, 30.0, 40.0];
        assert_eq!(percentile(&v, 0.0), 0.0);
        assert_eq!(percentile(&v, 1.0), 40.0);
        assert_eq!(percentile(&v, 0.5), 20.0);
        assert!((percentile(&v, 0.9) - 36.0).abs() < 1e-4);
        assert!((percentile(&v, 0.1) - 4.0).abs() < 1e-4);
        assert_eq!(median(&v), 20.0);
        assert_eq!(median(&v[..4]), 15.0);
    }

    #[test]
    fn ppl_estimate_matches_direct_computation() {
        let vs = [1.0, 2.0, 3.0, 0.5, 2.5];
        let mut s = PplSums::default();
        for v in vs {
            s.add(v);
        }
        let mean = vs.iter().sum::<f64>() / 5.0;
        let var = vs.iter().map(|v| v * v).sum::<f64>() / 5.0 - mean * mean;
        let (ppl, unc) = s.estimate().unwrap();
        assert!(close(ppl, mean.exp(), 1e-12));
        assert!(close(s.ppl(), mean.exp(), 1e-12));
        assert!(close(unc, mean.exp() * (var / 4.0).sqrt(), 1e-12));
        let mut flat = PplSums::default();
        flat.add(1.0);
        flat.add(1.0);
        assert_eq!(flat.estimate(), None);
    }

    fn score(i: usize) -> PositionScore {
        // Deterministic, varied values; every third top-1 differs.
        let x = i as f32;
        PositionScore {
            nll: 1.0 + (x * 0.37).sin().abs() * 3.0,
            nll_base: 1.1 + (x * 0.37 + 0.2).sin().abs() * 3.0,
            kld: f64::from(0.001 + (x * 0.11).cos().abs() * 0.05),
            p_diff: (x * 0.23).sin() * 0.1,
            top: i as u32 % 7,
            top_base: if i.is_multiple_of(3) {
                99
            } else {
                i as u32 % 7
            },
        }
    }

    #[test]
    fn kld_summary_matches_direct_computation() {
        let scores: Vec<PositionScore> = (0..200).map(score).collect();
        let mut sums = KldSums::default();
        for s in &scores {
            sums.add(s);
        }
        let n = scores.len() as f64;
        let mean = |f: &dyn Fn(&PositionScore) -> f64| scores.iter().map(f).sum::<f64>() / n;
        let sd_mean = |f: &dyn Fn(&PositionScore) -> f64| {
            let m = mean(f);
            let var = scores.iter().map(|s| (f(s) - m).powi(2)).sum::<f64>() / n;
            (var / (n - 1.0)).sqrt()
        };
        let q = |s: &PositionScore| f64::from(s.nll);
        let b = |s: &PositionScore| f64::from(s.nll_base);
        let sum = KldSummary::new(&sums, &scores).unwrap();

        assert!(close(sum.ppl.0, mean(&q).exp(), 1e-9));
        assert!(close(sum.ppl.1, mean(&q).exp() * sd_mean(&q), 1e-6));
        assert!(close(sum.ppl_base.0, mean(&b).exp(), 1e-9));
        // Pearson correlation of the NLLs, from centred sums.
        let (mq, mb) = (mean(&q), mean(&b));
        let cov = scores
            .iter()
            .map(|s| (q(s) - mq) * (b(s) - mb))
            .sum::<f64>()
            / n;
        let var_q = scores.iter().map(|s| (q(s) - mq).powi(2)).sum::<f64>() / n;
        let var_b = scores.iter().map(|s| (b(s) - mb).powi(2)).sum::<f64>() / n;
        assert!(close(sum.log_ppl_cor, cov / (var_q * var_b).sqrt(), 1e-6));
        assert!(close(sum.log_ppl_ratio.0, mq - mb, 1e-9));
        let d = |s: &PositionScore| q(s) - b(s);
        assert!(close(sum.log_ppl_ratio.1, sd_mean(&d), 1e-5));
        assert!(close(sum.ppl_ratio.0, (mq - mb).exp(), 1e-9));
        assert!(close(sum.ppl_diff.0, mq.exp() - mb.exp(), 1e-9));

        let k = |s: &PositionScore| s.kld;
        assert!(close(sum.kld.0, mean(&k), 1e-9));
        assert!(close(sum.kld.1, sd_mean(&k), 1e-6));
        let mut ks: Vec<f32> = scores.iter().map(|s| s.kld as f32).collect();
        ks.sort_by(f32::total_cmp);
        assert_eq!(sum.kld_max, ks[199]);
        assert_eq!(sum.kld_min, ks[0]);
        assert_eq!(sum.kld_median, 0.5 * (ks[99] + ks[100]));
        // 199 · 0.99 = 197.01: one hundredth of the way from ks[197].
        let p99 = 0.99 * ks[197] + 0.01 * ks[198];
        assert!((sum.kld_99 - p99).abs() <= 1e-6 * p99.abs());

        let dp = |s: &PositionScore| f64::from(s.p_diff);
        assert!(close(sum.p_diff.0, mean(&dp), 1e-7));
        let rms = (scores.iter().map(|s| dp(s).powi(2)).sum::<f64>() / n).sqrt();
        assert!(close(sum.rms_p_diff.0, rms, 1e-6));
        let same = scores.iter().filter(|s| s.same_top()).count() as f64 / n;
        assert!(close(sum.same_top.0, same, 1e-12));
        assert!(close(
            sum.same_top.1,
            (same * (1.0 - same) / (n - 1.0)).sqrt(),
            1e-12
        ));
        assert_eq!(sum.count, 200);
    }

    #[test]
    fn no_summary_under_a_hundred_positions() {
        let scores: Vec<PositionScore> = (0..99).map(score).collect();
        let mut sums = KldSums::default();
        for s in &scores {
            sums.add(s);
        }
        assert_eq!(KldSummary::new(&sums, &scores), None);
    }
}
