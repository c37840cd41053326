//! One row of logits `z[0..n_vocab]` as llama.cpp's perplexity tool treats
//! it: the negative log-likelihood of the next token, and the 16-bit form in
//! which a row's log-probabilities are stored in a logits file.
//!
//! Arithmetic is done in the types and order llama.cpp uses (f32 logits, an
//! f64 sum of f32 exponentials, `ln` of that sum taken in f64), so that a
//! row of logits gives the same stored bytes in both programs.

/// Log-probabilities more than this far below the row's maximum logit are
/// stored as the lowest level (so the stored range is at most 16 nats).
pub const LOG_PROB_RANGE: f32 = 16.0;

/// The number of steps between the lowest and highest stored level.
pub const LEVELS: f32 = 65535.0;

/// u16 values per stored row for a vocabulary of `n_vocab`: the row's
/// `scale` and `min_log_prob` (two f32, four u16), then one u16 per token,
/// padded to an even count: `2 * ceil(n_vocab / 2) + 4`.
pub fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// `std::max(a, b)` of C++: `a < b ? b : a`.
fn cpp_max(a: f32, b: f32) -> f32 {
    if a < b {
        b
    } else {
        a
    }
}

/// `std::min(a, b)` of C++: `b < a ? b : a`.
fn cpp_min(a: f32, b: f32) -> f32 {
    if b < a {
        b
    } else {
        a
    }
}

/// `m = max z`, `S = Σ_i exp(z_i − m)` (f32 exponentials summed in f64,
/// in index order).
fn max_and_sum_exp(logits: &[f32]) -> (f32, f64) {
    let max = logits[1..].iter().fold(logits[0], |m, &z| cpp_max(m, z));
    let sum = logits
        .iter()
        .fold(0f64, |s, &z| s + f64::from((z - max).exp()));
    (max, sum)
}

/// The negative log-likelihood of token `tok` under softmax(`logits`):
/// `−ln p_tok = −((z_tok − m) − ln S)` with `m = max z`,
/// `S = Σ_i exp(z_i − m)` (`z_tok − m` in f32, the rest in f64), as
/// llama-perplexity computes it when it writes no logits file.
pub fn nll(logits: &[f32], tok: usize) -> f64 {
    let (max, sum) = max_and_sum_exp(logits);
    -(f64::from(logits[tok] - max) - sum.ln())
}

/// llama.cpp's `nearest_int`: `x` rounded to the nearest integer, ties to
/// even, for `|x| < 2^22` (adds `1.5 · 2^23` and reads the low mantissa
/// bits).
pub fn nearest_int(x: f32) -> i32 {
    let bits = (x + 12_582_912.0f32).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

/// Stores the log-probabilities of `logits` in `out` (`row_len(n_vocab)`
/// u16) the way llama-perplexity writes them, and returns the negative
/// log-likelihood of `tok`.
///
/// With `m = max z`, `lo = max(min z, m − 16)`, `L = ln Σ_i exp(z_i − m)`:
/// - `out[0..2]` = `scale = (m − lo) / 65535` (f32, little-endian halves),
/// - `out[2..4]` = `min_log_prob = lo − m − L` (f32),
/// - `out[4 + i]` = `q_i = nearest_int((z_i − lo) / scale)` as u16 when
///   `z_i > lo`, else 0 (all 0 when `scale` is 0); a padding u16 is 0,
///
/// so that `ln p_i ≈ scale · q_i + min_log_prob` within `scale / 2` for
/// `z_i ≥ lo` (at most 16/65535/2 ≈ 1.2e-4 nats) and is clamped up to
/// `min_log_prob` below it. Returns `m + L − z_tok` (f32 arithmetic).
pub fn compress_row(logits: &[f32], tok: usize, out: &mut [u16]) -> f64 {
    let n = logits.len();
    assert_eq!(out.len(), row_len(n), "compress_row: output row length");
    let mut max = logits[0];
    let mut min = logits[0];
    for &z in &logits[1..] {
        max = cpp_max(max, z);
        min = cpp_min(min, z);
    }
    min = cpp_max(min, max - LOG_PROB_RANGE);
    let sum = logits
        .iter()
        .fold(0f64, |s, &z| s + f64::from((z - max).exp()));
    let log_sum_exp = sum.ln() as f32;
    let min_log_prob = min - max - log_sum_exp;
    let scale = (max - min) / LEVELS;
    let (head, levels) = out.split_at_mut(4);
    put_f32(&mut head[0..2], scale);
    put_f32(&mut head[2..4], min_log_prob);
    if scale != 0.0 {
        let inv_scale = 1.0 / scale;
        for (q, &z) in levels.iter_mut().zip(logits) {
            // A level of 65536 wraps to 0 as in C++'s int-to-uint16_t.
            *q = if z > min {
                nearest_int(inv_scale * (z - min)) as u16
            } else {
                0
            };
        }
    } else {
        levels[..n].fill(0);
    }
    levels[n..].fill(0);
    f64::from(max + log_sum_exp - logits[tok])
}

/// A stored row's `(scale, min_log_prob)` (its first four u16).
pub fn row_scale(row: &[u16]) -> (f32, f32) {
    (get_f32(&row[0..2]), get_f32(&row[2..4]))
}

/// The stored log-probability of token `i`: `scale · q_i + min_log_prob`.
pub fn stored_log_prob(row: &[u16], i: usize) -> f32 {
    let (scale, min_log_prob) = row_scale(row);
    scale * f32::from(row[4 + i]) + min_log_prob
}

/// Writes `x` as two u16, low half first (its little-endian bytes).
fn put_f32(dst: &mut [u16], x: f32) {
    let b = x.to_bits();
    dst[0] = b as u16;
    dst[1] = (b >> 16) as u16;
}

fn get_f32(src: &[u16]) -> f32 {
    f32::from_bits(u32::from(src[0]) | (u32::from(src[1]) << 16))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact log-softmax in f64, for reference.
    fn log_softmax(z: &[f32]) -> Vec<f64> {
        let m = z
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let s: f64 = z.iter().map(|&v| (f64::from(v) - m).exp()).sum();
        z.iter().map(|&v| f64::from(v) - m - s.ln()).collect()
    }

    /// Pseudo-random logits in [-spread/2, spread/2).
    fn logits(n: usize, seed: u64, spread: f32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * spread
            })
            .collect()
    }

    #[test]
    fn row_len_pads_to_even_and_adds_the_two_floats() {
        assert_eq!(row_len(1), 6);
        assert_eq!(row_len(2), 6);
        assert_eq!(row_len(3), 8);
        assert_eq!(row_len(49152), 49156);
        assert_eq!(row_len(262144), 262148);
    }

    #[test]
    fn nearest_int_rounds_half_to_even() {
        for (x, want) in [
            (0.0, 0),
            (0.4, 0),
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (65534.5, 65534),
            (65535.2, 65535),
            (-1.5, -2),
            (-0.6, -1),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
        }
    }

    #[test]
    fn nll_is_minus_the_log_softmax() {
        let z = logits(101, 7, 12.0);
        let exact = log_softmax(&z);
        for tok in [0, 13, 100] {
            assert!((nll(&z, tok) + exact[tok]).abs() < 1e-5, "token {tok}");
        }
        // Two equal logits: ln 2.
        assert!((nll(&[3.0, 3.0], 1) - 2f64.ln()).abs() < 1e-7);
    }

    #[test]
    fn decoded_row_is_within_half_a_step_of_the_exact_log_probs() {
        for (n, spread) in [(1000, 10.0), (999, 40.0), (64, 0.001)] {
            let z = logits(n, n as u64, spread);
            let exact = log_softmax(&z);
            let mut row = vec![0xffff; row_len(n)];
            let v = compress_row(&z, 5, &mut row);
            assert!((v + exact[5]).abs() < 1e-5, "nll of token 5");
            let (scale, min_log_prob) = row_scale(&row);
            assert!(scale > 0.0 && scale <= LOG_PROB_RANGE / LEVELS);
            let max = z.iter().copied().fold(f32::MIN, f32::max);
            let lo = z
                .iter()
                .copied()
                .fold(f32::MAX, f32::min)
                .max(max - LOG_PROB_RANGE);
            for i in 0..n {
                let got = f64::from(stored_log_prob(&row, i));
                if z[i] >= lo {
                    let err = (got - exact[i]).abs();
                    assert!(
                        err <= f64::from(scale) / 2.0 + 2e-5,
                        "n {n} token {i}: error {err} over half a step {}",
                        scale / 2.0
                    );
                } else {
                    assert_eq!(got, f64::from(min_log_prob), "clamped token {i}");
                    assert!(got >= exact[i]);
                }
            }
            if n % 2 == 1 {
                assert_eq!(row[4 + n], 0, "padding");
            }
        }
    }

    #[test]
    fn a_flat_row_stores_zero_scale_and_the_uniform_log_prob() {
        let z = vec![2.5f32; 7];
        let mut row = vec![9; row_len(7)];
        let v = compress_row(&z, 3, &mut row);
        let (scale, min_log_prob) = row_scale(&row);
        assert_eq!(scale, 0.0);
        assert!((f64::from(min_log_prob) + 7f64.ln()).abs() < 1e-6);
        assert!(row[4..].iter().all(|&q| q == 0));
        assert!((v - 7f64.ln()).abs() < 1e-6);
    }

    #[test]
    fn the_top_token_gets_the_highest_level_and_f32_halves_are_little_endian() {
        let z = [0.0f32, 1.0, 4.0, -3.0];
        let mut row = vec![0; row_len(4)];
        compress_row(&z, 0, &mut row);
        assert_eq!(row[4 + 2], 65535);
        assert_eq!(row[4 + 3], 0);
        let scale = 7.0f32 / 65535.0;
        let b = scale.to_bits();
        assert_eq!((row[0], row[1]), (b as u16, (b >> 16) as u16));
    }
}
