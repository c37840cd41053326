//! Pure comparison metrics between a reference tensor `a` and a candidate `b`.
//! Conventions follow llama.cpp's test-backend-ops where one exists.

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

#[cfg(test)]
mod tests {
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
