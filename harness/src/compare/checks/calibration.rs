//! The pieces the checks' calibration rules ([`super::Check::calibrate`])
//! are made of: the headroom rule ([`Rules`], [`ceil125`]), a figure at its
//! worst and where ([`worst_of`]), and how a limit is written
//! ([`Drafted`], [`toml_key`], [`limit_text`], [`measured_text`]).

/// How measurements become limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rules {
    pub headroom: f64,
    /// The cpu path's layer-0 taps that no re-quantized value reaches
    /// ([`super::taps::EXACT_LAYER0`]).
    pub exact_layer0: f64,
    /// The cpu path's other layer-0 taps.
    pub rest_layer0: f64,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            headroom: 4.0,
            exact_layer0: 1e-10,
            rest_layer0: 1e-3,
        }
    }
}

/// Least limit of an NMSE (a figure measured 0).
pub const NMSE_FLOOR: f64 = 1e-12;
/// Least limit of a KL divergence.
pub const KLD_FLOOR: f64 = 1e-9;

/// `x` rounded up to 1, 2 or 5 times a power of ten.
pub fn ceil125(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x;
    }
    let e = x.log10().floor() as i32;
    for m in [1.0, 2.0, 5.0, 10.0] {
        let v = m * 10f64.powi(e);
        if v >= x * (1.0 - 1e-12) {
            return v;
        }
    }
    10f64.powi(e + 1)
}

/// The limit of a figure where higher is worse: the worst measured times
/// the headroom, rounded up by [`ceil125`], at least `floor`.
pub fn with_headroom(worst: f64, rules: &Rules, floor: f64) -> f64 {
    ceil125(worst * rules.headroom).max(floor)
}

/// A figure at its worst, and where.
#[derive(Clone, Debug)]
pub struct Worst {
    pub value: f64,
    pub at: String,
}

/// The worst of `items` (the first of equals).
pub fn worst_of(
    items: impl Iterator<Item = (f64, String)>,
    higher_is_worse: bool,
) -> Option<Worst> {
    let mut best: Option<Worst> = None;
    for (value, at) in items {
        let better = match &best {
            None => true,
            Some(w) if higher_is_worse => value > w.value,
            Some(w) => value < w.value,
        };
        if better {
            best = Some(Worst { value, at });
        }
    }
    best
}

/// Part of an entry's limits as a check drew them: TOML text (each limit
/// with its measurement and where in a comment), placed by `key`, the
/// first of [`super::thresholds::KEYS`] it writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Drafted {
    pub key: &'static str,
    pub text: String,
}

/// A TOML key: bare when it can be.
pub fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        k.to_string()
    } else {
        format!("{k:?}")
    }
}

/// A measurement in a comment: `3.14e-5`.
pub fn measured_text(x: f64) -> String {
    format!("{x:.2e}")
}

/// A limit: `5e-5`.
pub fn limit_text(x: f64) -> String {
    format!("{x:.0e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil125_rounds_up_to_one_two_five() {
        for (x, want) in [
            (1.0, 1.0),
            (1.01, 2.0),
            (3.0, 5.0),
            (6.0, 10.0),
            (4.1e-3, 5e-3),
            (2e-10, 2e-10),
            (9.99e-7, 1e-6),
        ] {
            let got = ceil125(x);
            assert!((got - want).abs() <= want * 1e-12, "{x}: {got} != {want}");
        }
        assert_eq!(ceil125(0.0), 0.0);
        assert_eq!(with_headroom(0.0, &Rules::default(), NMSE_FLOOR), 1e-12);
        assert_eq!(with_headroom(1.1e-3, &Rules::default(), NMSE_FLOOR), 5e-3);
    }

    #[test]
    fn the_worst_is_the_first_of_equals() {
        let items =
            [(1.0, "a"), (3.0, "b"), (3.0, "c"), (0.5, "d")].map(|(v, at)| (v, at.to_string()));
        assert_eq!(worst_of(items.clone().into_iter(), true).unwrap().at, "b");
        assert_eq!(worst_of(items.into_iter(), false).unwrap().at, "d");
        assert!(worst_of(std::iter::empty(), true).is_none());
    }

    #[test]
    fn keys_are_quoted_where_toml_needs_it() {
        assert_eq!(toml_key("cpu"), "cpu");
        assert_eq!(toml_key("gpu-vs-cpu"), "gpu-vs-cpu");
        assert_eq!(toml_key("smollm2.q8_0"), "\"smollm2.q8_0\"");
    }
}
