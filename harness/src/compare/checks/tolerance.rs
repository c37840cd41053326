//! What counts as worse than a baseline, the pieces the checks' rules
//! ([`super::Check::regressions`]) are made of: a [`Figure`] (its name, how
//! its values read, its rule), a [`Tolerance`] for a figure where higher
//! is worse, the exact comparison of agreeing counts ([`top1_worse`]), and
//! what a rule found ([`Found`]).

use crate::compare::sci;

/// How much a figure where higher is worse may grow: it is worse when
/// above `factor × max(baseline, floor)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub factor: f64,
    /// Below this a figure is held to the floor (a baseline of 0 would
    /// make any change a regression).
    pub floor: f64,
}

impl Tolerance {
    /// Whether `now` is worse than `baseline` beyond this tolerance. A NaN
    /// now is worse than any number; a NaN baseline holds nothing.
    pub fn worse(&self, baseline: f64, now: f64) -> bool {
        if baseline.is_nan() {
            return false;
        }
        if now.is_nan() {
            return true;
        }
        now > self.factor * baseline.max(self.floor)
    }

    /// "2x" or "+10%", and the floor.
    pub fn describe(&self) -> String {
        let grow = if self.factor >= 2.0 {
            format!("{}x", self.factor)
        } else {
            format!("+{:.0}%", (self.factor - 1.0) * 100.0)
        };
        format!("{grow} (floor {:.0e})", self.floor)
    }
}

/// Whether a lower share of positions agree now: `(agree, positions)`
/// each (compared exactly, in integers).
pub fn top1_worse(baseline: (usize, usize), now: (usize, usize)) -> bool {
    let (ba, bp) = baseline;
    let (na, np) = now;
    if bp == 0 || np == 0 {
        return false;
    }
    na * bp < ba * np
}

/// How a figure's values read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// `3.1e-1`.
    Sci,
    /// A share: `80%`.
    Percent,
    /// `4 steps`.
    Steps,
    /// A count: `3`.
    Count,
    /// A layer: `layer 0` (NaN: `none`).
    Layer,
}

/// A figure's rule, in words.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// Worse beyond a tolerance.
    Grows(Tolerance),
    /// Each of several (`"each tap"`) worse beyond a tolerance.
    EachGrows(&'static str, Tolerance),
    /// Said in words ("fewer steps agree").
    Words(&'static str),
}

/// A figure compared with the baseline, written in reports by its name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figure {
    pub name: &'static str,
    pub reads: Reads,
    pub rule: Rule,
}

impl Figure {
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The rule, in words.
    pub fn rule(self) -> String {
        match self.rule {
            Rule::Grows(t) => t.describe(),
            Rule::EachGrows(each, t) => format!("{each} {}", t.describe()),
            Rule::Words(w) => w.into(),
        }
    }

    /// `value` as this figure reads: `3.1e-1`, `80%` (top-1), `4 steps`,
    /// `layer 0`.
    pub fn show(self, value: f64) -> String {
        match self.reads {
            Reads::Sci => sci(value),
            Reads::Percent => format!("{:.0}%", 100.0 * value),
            Reads::Steps => format!("{value:.0} steps"),
            Reads::Count => format!("{value:.0}"),
            Reads::Layer if value.is_nan() => "none".into(),
            Reads::Layer => format!("layer {value:.0}"),
        }
    }
}

impl serde::Serialize for Figure {
    /// Its name.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name)
    }
}

// The figures that more than one check measures (a prompt's and a
// corpus's): one rule under one name.

/// KLD mean over a prompt's positions (or a corpus's): +10%, floor 1e-6
/// nats.
pub const KLD_MEAN: Figure = Figure {
    name: "kld_mean",
    reads: Reads::Sci,
    rule: Rule::Grows(Tolerance {
        factor: 1.10,
        floor: 1e-6,
    }),
};
/// The share of positions whose most likely token agrees (a prompt's, or
/// a corpus's): lower is worse.
pub const TOP1: Figure = Figure {
    name: "top1",
    reads: Reads::Percent,
    rule: Rule::Words("fewer positions agree"),
};

/// A figure that got worse: which, its value in the baseline and now, and
/// the line saying so.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub figure: Figure,
    pub baseline: f64,
    pub now: f64,
    pub detail: String,
}

impl Found {
    /// `what` (a figure with a tolerance) grown beyond `figure`'s rule, or
    /// None.
    pub fn grown(figure: Figure, what: &str, baseline: f64, now: f64) -> Option<Found> {
        let Rule::Grows(tol) = figure.rule else {
            panic!("{} has no tolerance", figure.name)
        };
        tol.worse(baseline, now).then(|| Found {
            figure,
            baseline,
            now,
            detail: format!(
                "{what} {} against {} in the baseline (tolerance {})",
                sci(now),
                sci(baseline),
                tol.describe()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KLD_MEAN: Tolerance = Tolerance {
        factor: 1.10,
        floor: 1e-6,
    };
    const TAP_NMSE: Tolerance = Tolerance {
        factor: 2.0,
        floor: 1e-12,
    };

    #[test]
    fn worse_beyond_the_tolerance_only() {
        // +10%: 1.09x is within, 1.11x is not.
        assert!(!KLD_MEAN.worse(1e-3, 1.09e-3));
        assert!(KLD_MEAN.worse(1e-3, 1.11e-3));
        assert!(!TAP_NMSE.worse(1e-4, 1.9e-4));
        assert!(TAP_NMSE.worse(1e-4, 2.1e-4));
        // Better is never worse.
        assert!(!TAP_NMSE.worse(1e-2, 1e-5));
        // A zero baseline is held to the floor, not to 0.
        assert!(!TAP_NMSE.worse(0.0, 1.5e-12));
        assert!(TAP_NMSE.worse(0.0, 3e-12));
        assert!(!KLD_MEAN.worse(0.0, 1e-6));
        assert!(KLD_MEAN.worse(0.0, 2e-6));
        // NaN now is worse; a NaN baseline holds nothing.
        assert!(TAP_NMSE.worse(1e-3, f64::NAN));
        assert!(!TAP_NMSE.worse(f64::NAN, 1.0));
        assert_eq!(KLD_MEAN.describe(), "+10% (floor 1e-6)");
        assert_eq!(TAP_NMSE.describe(), "2x (floor 1e-12)");
    }

    #[test]
    fn fewer_agreeing_positions() {
        assert!(top1_worse((5, 5), (4, 5)));
        assert!(!top1_worse((4, 5), (5, 5)));
        assert!(!top1_worse((5, 5), (5, 5)));
        // Rates when the positions differ: 9/10 against 18/20 is the same.
        assert!(!top1_worse((9, 10), (18, 20)));
        assert!(top1_worse((9, 10), (17, 20)));
        assert!(!top1_worse((0, 0), (0, 3)));
    }

    #[test]
    fn a_figure_reads_and_says_its_rule() {
        let f = |reads, rule| Figure {
            name: "x",
            reads,
            rule,
        };
        let each = f(Reads::Sci, Rule::EachGrows("each tap", TAP_NMSE));
        assert_eq!(each.rule(), "each tap 2x (floor 1e-12)");
        assert_eq!(each.show(3.14e-1), "3.1e-1");
        assert_eq!(f(Reads::Percent, Rule::Words("w")).show(0.8), "80%");
        assert_eq!(f(Reads::Steps, Rule::Words("w")).show(4.0), "4 steps");
        assert_eq!(f(Reads::Layer, Rule::Words("w")).show(f64::NAN), "none");
        assert_eq!(f(Reads::Layer, Rule::Words("w")).show(2.0), "layer 2");
        let kld = f(Reads::Sci, Rule::Grows(KLD_MEAN));
        assert!(Found::grown(kld, "KLD mean", 1e-3, 1.09e-3).is_none());
        let found = Found::grown(kld, "KLD mean", 1e-3, 2e-3).unwrap();
        assert_eq!(
            found.detail,
            format!(
                "KLD mean {} against {} in the baseline (tolerance +10% (floor 1e-6))",
                sci(2e-3),
                sci(1e-3)
            )
        );
    }
}
