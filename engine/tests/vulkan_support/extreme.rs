//! Inputs of large (and tiny) magnitude and special values for the
//! extreme-range op tests (`vulkan_extreme_*.rs`), and their check: every
//! element of the same IEEE class on both backends (NaN where the CPU has
//! NaN, an infinity of the same sign, finite where it is finite), then the
//! NMSE over the elements finite on both, as llama.cpp's test-backend-ops
//! judges a backend (any NaN fails there; here a NaN must sit where the
//! reference has one).

use super::values;

/// What kind of f32 a value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Nan,
    PosInf,
    NegInf,
    Finite,
}

pub fn class(v: f32) -> Class {
    if v.is_nan() {
        Class::Nan
    } else if v == f32::INFINITY {
        Class::PosInf
    } else if v == f32::NEG_INFINITY {
        Class::NegInf
    } else {
        Class::Finite
    }
}

/// `n` values `±10^e` with `e` uniform in `[lo, hi]` and a random sign
/// (log-uniform magnitudes), from [`values`]' generator.
pub fn spread(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let u = values(seed, 2 * n);
    (0..n)
        .map(|i| {
            let e = lo + (hi - lo) * (u[2 * i] + 1.0) * 0.5;
            let m = 10f32.powf(e);
            if u[2 * i + 1] < 0.0 {
                -m
            } else {
                m
            }
        })
        .collect()
}

/// [`values`] times `s`.
pub fn scaled(seed: u64, n: usize, s: f32) -> Vec<f32> {
    values(seed, n).into_iter().map(|v| v * s).collect()
}

/// The specials every NaN/Inf test plants.
pub const SPECIALS: [f32; 3] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];

/// Per element, the class of `got` must be that of `want`; returns the NMSE
/// over the elements finite on both (0 when none is). Panics naming the
/// first element whose class differs.
pub fn classes_and_nmse(what: &str, want: &[f32], got: &[f32]) -> f64 {
    assert_eq!(want.len(), got.len(), "{what}: lengths");
    for (i, (&w, &g)) in want.iter().zip(got).enumerate() {
        assert!(
            class(w) == class(g),
            "{what}: element {i}: GPU {g:e} ({:?}) where the CPU has {w:e} ({:?})",
            class(g),
            class(w)
        );
    }
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (&w, &g) in want.iter().zip(got) {
        if w.is_finite() {
            let d = f64::from(g) - f64::from(w);
            err += d * d;
            norm += f64::from(w) * f64::from(w);
        }
    }
    if norm == 0.0 {
        return if err == 0.0 { 0.0 } else { f64::INFINITY };
    }
    err / norm
}

/// [`classes_and_nmse`], failing above `limit`.
pub fn assert_classes_nmse(what: &str, want: &[f32], got: &[f32], limit: f64) -> f64 {
    let e = classes_and_nmse(what, want, got);
    assert!(e <= limit, "{what}: NMSE {e:e} over {limit:e}");
    e
}

/// The same class everywhere and the same bits wherever not NaN (NaN
/// payloads are the device's business).
pub fn assert_same_values(what: &str, want: &[f32], got: &[f32]) {
    classes_and_nmse(what, want, got);
    for (i, (&w, &g)) in want.iter().zip(got).enumerate() {
        assert!(
            w.is_nan() || w.to_bits() == g.to_bits(),
            "{what}: element {i}: GPU {g:e} ({:#010x}), CPU {w:e} ({:#010x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}

/// `v` with every denormal replaced by a zero of its sign: what a device
/// that flushes denormals reads and writes.
pub fn ftz(v: &[f32]) -> Vec<f32> {
    v.iter()
        .map(|&x| {
            if x.is_subnormal() {
                0.0f32.copysign(x)
            } else {
                x
            }
        })
        .collect()
}

/// The reference of a device that may flush denormals: per element, the
/// CPU's value `want` where `got` matches it, else `flushed` (the CPU's
/// result from flushed inputs, flushed) where given. Devices that do not
/// promise to keep f32 denormals (`DeviceLimits::denorm_preserve_f32`
/// false) may flush them (Vulkan's float controls); `flushed` is `None`
/// for the rest.
pub fn either(want: &[f32], flushed: Option<&[f32]>, got: &[f32]) -> Vec<f32> {
    let Some(flushed) = flushed else {
        return want.to_vec();
    };
    let same = |a: f32, b: f32| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
    want.iter()
        .zip(flushed)
        .zip(got)
        .map(|((&w, &f), &g)| {
            if same(w, g) || class(w) == class(g) && !same(f, g) && (g - w).abs() <= (g - f).abs() {
                w
            } else {
                f
            }
        })
        .collect()
}

/// The worst figure seen per case, printed when dropped (`--nocapture`):
/// the measured worst that each limit's comment quotes.
#[derive(Default)]
pub struct Worst(Vec<(String, f64)>);

impl Worst {
    pub fn note(&mut self, what: &str, e: f64) {
        match self.0.iter_mut().find(|(w, _)| w == what) {
            Some((_, v)) => *v = v.max(e),
            None => self.0.push((what.to_string(), e)),
        }
    }
}

impl Drop for Worst {
    fn drop(&mut self) {
        for (what, e) in &self.0 {
            eprintln!("worst NMSE {what}: {e:e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_must_match() {
        let w = [1.0, f32::NAN, f32::INFINITY];
        assert_eq!(
            classes_and_nmse("ok", &w, &[1.0, f32::NAN, f32::INFINITY]),
            0.0
        );
        for bad in [
            [1.0, 0.0, f32::INFINITY],
            [1.0, f32::NAN, f32::NEG_INFINITY],
            [f32::NAN, f32::NAN, f32::INFINITY],
        ] {
            let r = std::panic::catch_unwind(|| classes_and_nmse("bad", &w, &bad));
            assert!(r.is_err(), "{bad:?} passes");
        }
        let e = classes_and_nmse("nmse", &[2.0, f32::NAN], &[3.0, f32::NAN]);
        assert_eq!(e, 0.25);
    }

    #[test]
    fn either_takes_the_flushed_value_only_where_it_is_the_match() {
        let tiny = f32::MIN_POSITIVE / 4.0;
        assert_eq!(ftz(&[tiny, -tiny, 1.0]), vec![0.0, -0.0, 1.0]);
        assert!(ftz(&[-tiny])[0].is_sign_negative());
        let want = [1.0 + 0.0, 2.0, tiny];
        let flushed = [1.0, 2.0, 0.0];
        // The GPU flushed the third: the flushed value is the reference.
        assert_eq!(either(&want, Some(&flushed), &[1.0, 2.0, 0.0]), flushed);
        // It kept it: the CPU's.
        assert_eq!(either(&want, Some(&flushed), &[1.0, 2.0, tiny]), want);
        // A wrong value stays wrong against either.
        let e = either(&want, Some(&flushed), &[1.0, 3.0, tiny]);
        assert!(
            std::panic::catch_unwind(|| assert_same_values("x", &e, &[1.0, 3.0, tiny])).is_err()
        );
        assert_eq!(either(&want, None, &[0.0; 3]), want);
    }

    #[test]
    fn spread_covers_the_range() {
        let v = spread(1, 1000, -30.0, 30.0);
        assert!(v.iter().any(|x| x.abs() < 1e-25) && v.iter().any(|x| x.abs() > 1e25));
        assert!(v.iter().any(|&x| x < 0.0) && v.iter().all(|x| x.is_finite()));
    }
}
