//! One scored position against a stored base row: the KL divergence of our
//! distribution from the base's, the change in the probability of the
//! token that came next, and both top-1 tokens — what llama-perplexity
//! computes per position with `--kl-divergence`.

use super::logprob::row_scale;

/// The base ("P") and our ("Q") view of one position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PositionScore {
    /// Our negative log-likelihood of the next token, `−ln q_tok`.
    pub nll: f32,
    /// The base's, from its stored row: `−(scale · q_tok + min_log_prob)`.
    pub nll_base: f32,
    /// `KLD(P‖Q) = Σ_{i : ln p_i > −16} p_i (ln p_i − ln q_i)`: the base's
    /// stored log-probabilities `ln p_i`, tokens whose stored log-prob is
    /// −16 or less left out (as llama.cpp does).
    pub kld: f64,
    /// `Δp = q_tok − p_tok = exp(−nll) − exp(−nll_base)`.
    pub p_diff: f32,
    /// Our top-1 token (the first index of the largest logit).
    pub top: u32,
    /// The base's top-1 token (the first index of the largest stored
    /// log-prob).
    pub top_base: u32,
}

impl PositionScore {
    /// Whether both put the same token first.
    pub fn same_top(&self) -> bool {
        self.top == self.top_base
    }
}

/// Scores our `logits` `[n_vocab]` against the stored base `row`
/// (`row_len(n_vocab)` u16, see [`super::logprob::compress_row`]) for the
/// next token `tok`. With `m = max z`, `L = ln Σ_i exp(z_i − m)` and
/// `ln q_i = z_i − (m + L)`, in llama.cpp's f32/f64 order of operations.
pub fn score_position(logits: &[f32], row: &[u16], tok: usize) -> PositionScore {
    let n = logits.len();
    assert_eq!(row.len(), super::logprob::row_len(n), "base row length");
    let mut max = logits[0];
    let mut top = 0;
    for (i, &z) in logits.iter().enumerate().skip(1) {
        if z > max {
            max = z;
            top = i;
        }
    }
    let sum = logits
        .iter()
        .fold(0f64, |s, &z| s + f64::from((z - max).exp()));
    let log_sum_exp = sum.ln() as f32;
    let (scale, min_log_prob) = row_scale(row);
    let levels = &row[4..4 + n];

    let nll = max + log_sum_exp - logits[tok];
    let nll_base = -(scale * f32::from(levels[tok]) + min_log_prob);
    let log_norm = max + log_sum_exp;

    let mut kld = 0f64;
    let mut top_base = 0;
    let mut best_base = 0f32;
    for (i, (&q, &z)) in levels.iter().zip(logits).enumerate() {
        let log_p = scale * f32::from(q) + min_log_prob;
        if i == 0 || log_p > best_base {
            best_base = log_p;
            top_base = i;
        }
        if log_p > -LOG_P_FLOOR {
            let p = log_p.exp();
            kld += f64::from(p * (log_p - z + log_norm));
        }
    }
    PositionScore {
        nll,
        nll_base,
        kld,
        p_diff: (-nll).exp() - (-nll_base).exp(),
        top: top as u32,
        top_base: top_base as u32,
    }
}

/// Base tokens with `ln p ≤ −16` do not enter the KL divergence.
const LOG_P_FLOOR: f32 = 16.0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perplexity::logprob::{compress_row, row_len};

    fn stored(z: &[f32]) -> Vec<u16> {
        let mut row = vec![0; row_len(z.len())];
        compress_row(z, 0, &mut row);
        row
    }

    fn softmax(z: &[f32]) -> Vec<f64> {
        let m = z
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let e: Vec<f64> = z.iter().map(|&v| (f64::from(v) - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|v| v / s).collect()
    }

    #[test]
    fn identical_distributions_have_almost_no_divergence() {
        let z = [1.0f32, 2.0, 0.5, -1.0, 3.0];
        let s = score_position(&z, &stored(&z), 2);
        assert!(s.kld.abs() < 1e-4, "kld {}", s.kld);
        assert!(s.p_diff.abs() < 1e-4);
        assert!((s.nll - s.nll_base).abs() < 1e-4);
        assert_eq!((s.top, s.top_base), (4, 4));
        assert!(s.same_top());
    }

    #[test]
    fn divergence_and_delta_p_match_direct_computation() {
        let base = [0.0f32, 1.0, 2.0, 0.5];
        let ours = [0.3f32, 0.7, 1.5, 1.9];
        let (p, q) = (softmax(&base), softmax(&ours));
        let want: f64 = p.iter().zip(&q).map(|(p, q)| p * (p.ln() - q.ln())).sum();
        let s = score_position(&ours, &stored(&base), 3);
        assert!((s.kld - want).abs() < 1e-4, "kld {} want {want}", s.kld);
        assert!((f64::from(s.p_diff) - (q[3] - p[3])).abs() < 1e-4);
        assert!((f64::from(s.nll) + q[3].ln()).abs() < 1e-5);
        assert!((f64::from(s.nll_base) + p[3].ln()).abs() < 1e-4);
        assert_eq!((s.top, s.top_base), (3, 2));
        assert!(!s.same_top());
    }

    #[test]
    fn base_tokens_below_the_floor_are_left_out() {
        // Token 1 is 30 nats below the top: stored at the floor (−16 and
        // less), it adds nothing even though ours gives it most mass.
        let base = [0.0f32, -30.0, 0.0];
        let ours = [0.0f32, 5.0, 0.0];
        let (p, q) = (softmax(&base), softmax(&ours));
        let want: f64 = [0, 2].iter().map(|&i| p[i] * (p[i].ln() - q[i].ln())).sum();
        let s = score_position(&ours, &stored(&base), 0);
        assert!((s.kld - want).abs() < 1e-4, "kld {} want {want}", s.kld);
    }
}
