//! What counts as worse than a baseline (`harness compare --baseline
//! OLD.json`, [`super::baseline`]): the rules, one figure of one item at a
//! time, and what a comparison found ([`BaselineComparison`], kept in the
//! report).
//!
//! An item is one model × prompt × path (against llama.cpp) or one path
//! against the run's first path ("gpu~cpu"); items are matched by model,
//! prompt and path. What counts as worse, all in one place here:
//!
//! | figure | worse when |
//! |---|---|
//! | `logits_nmse` | above 2 × the baseline's ([`LOGITS_NMSE`]) |
//! | `kld_mean` | above 1.10 × (+10%) ([`KLD_MEAN`]); a prompt's, or the corpus's |
//! | `kld_max` | above 1.25 × (+25%) ([`KLD_MAX`]) |
//! | `tap_nmse` | any tap (name and layer) above 2 × its baseline NMSE ([`TAP_NMSE`]) |
//! | `first_divergence` | the first tap over its limit is earlier in graph order (or new) |
//! | `kld_p99` | the corpus's 99th-percentile KLD above 1.25 × (+25%) ([`KLD_P99`]) |
//! | `top1` | a lower share of positions whose most likely token agrees |
//! | `greedy` | fewer agreeing steps (of the steps both runs compared) |
//! | `validation` | more Vulkan validation messages |
//!
//! A ratio is taken against `max(baseline, floor)`: a baseline of 0 (a
//! bit-identical tensor) is held to the floor, not to 0. The exact checks
//! (tokens, tokenizer corpus, chat renders, end-of-generation set) and the
//! timings are not compared. Items present in only one report are listed,
//! not failed.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::compare::checks::corpus::CorpusResult;
use crate::compare::checks::cross::CrossResult;
use crate::compare::checks::greedy::GreedyResult;
use crate::compare::checks::logits::LogitsResult;
use crate::compare::checks::taps::{TapRow, TapsResult};
use crate::compare::{sci, Path};

/// How much a figure where higher is worse may grow: it is worse when
/// above `factor × max(baseline, floor)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub factor: f64,
    /// Below this a figure is held to the floor (a baseline of 0 would
    /// make any change a regression).
    pub floor: f64,
}

/// Last-position logits NMSE: 2×, floor 1e-12.
pub const LOGITS_NMSE: Tolerance = Tolerance {
    factor: 2.0,
    floor: 1e-12,
};
/// KLD mean over a prompt's positions: +10%, floor 1e-6 nats.
pub const KLD_MEAN: Tolerance = Tolerance {
    factor: 1.10,
    floor: 1e-6,
};
/// KLD max over a prompt's positions: +25%, floor 1e-6 nats.
pub const KLD_MAX: Tolerance = Tolerance {
    factor: 1.25,
    floor: 1e-6,
};
/// The corpus's 99th-percentile KLD: +25%, floor 1e-6 nats.
pub const KLD_P99: Tolerance = Tolerance {
    factor: 1.25,
    floor: 1e-6,
};
/// Each tap's NMSE: 2×, floor 1e-12 (layer 0 agrees to ~1e-13 or exactly).
pub const TAP_NMSE: Tolerance = Tolerance {
    factor: 2.0,
    floor: 1e-12,
};

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

/// A figure compared with the baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    LogitsNmse,
    KldMean,
    KldMax,
    KldP99,
    TapNmse,
    FirstDivergence,
    Top1,
    Greedy,
    Validation,
}

impl Figure {
    pub fn name(self) -> &'static str {
        match self {
            Figure::LogitsNmse => "logits_nmse",
            Figure::KldMean => "kld_mean",
            Figure::KldMax => "kld_max",
            Figure::KldP99 => "kld_p99",
            Figure::TapNmse => "tap_nmse",
            Figure::FirstDivergence => "first_divergence",
            Figure::Top1 => "top1",
            Figure::Greedy => "greedy",
            Figure::Validation => "validation",
        }
    }

    /// The rule, in words (the table above).
    pub fn rule(self) -> String {
        match self {
            Figure::LogitsNmse => LOGITS_NMSE.describe(),
            Figure::KldMean => KLD_MEAN.describe(),
            Figure::KldMax => KLD_MAX.describe(),
            Figure::KldP99 => KLD_P99.describe(),
            Figure::TapNmse => format!("each tap {}", TAP_NMSE.describe()),
            Figure::FirstDivergence => "earlier in graph order".into(),
            Figure::Top1 => "fewer positions agree".into(),
            Figure::Greedy => "fewer steps agree".into(),
            Figure::Validation => "more messages".into(),
        }
    }
}

/// One figure of one item worse than in the baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Regression {
    pub model: String,
    pub prompt: String,
    pub path: Path,
    /// For a path against the run's first path: that path.
    pub against: Option<Path>,
    pub figure: Figure,
    /// The figure in the baseline and now (`tap_nmse`: the worst tap's;
    /// `first_divergence`: its layer, NaN for none).
    #[serde(deserialize_with = "crate::nan::f64")]
    pub baseline: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub now: f64,
    /// What got worse, in one line.
    pub detail: String,
}

impl Regression {
    /// `value` (its [`Regression::baseline`] or [`Regression::now`]) as
    /// this figure reads: `3.1e-1`, `80%` (top-1), `4 steps`, `layer 0`.
    pub fn show(&self, value: f64) -> String {
        match self.figure {
            Figure::Top1 => format!("{:.0}%", 100.0 * value),
            Figure::Greedy => format!("{value:.0} steps"),
            Figure::Validation => format!("{value:.0}"),
            Figure::FirstDivergence if value.is_nan() => "none".into(),
            Figure::FirstDivergence => format!("layer {value:.0}"),
            _ => sci(value),
        }
    }

    /// `model/prompt/path` or `model/prompt/path~first`.
    pub fn item(&self) -> String {
        item_key(&self.model, &self.prompt, self.path, self.against)
    }
}

pub(crate) fn item_key(model: &str, prompt: &str, path: Path, against: Option<Path>) -> String {
    match against {
        Some(a) => format!("{model}/{prompt}/{path}~{a}"),
        None => format!("{model}/{prompt}/{path}"),
    }
}

/// What `--baseline` found, kept in the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BaselineComparison {
    /// The baseline report's file and commit.
    pub file: String,
    pub commit: String,
    pub regressions: Vec<Regression>,
    /// Items (`model/prompt/path`) only this run has, and only the
    /// baseline has: reported, not failed.
    pub only_here: Vec<String>,
    pub only_baseline: Vec<String>,
    /// Why the two may not be comparable (other reference data, limits).
    pub warnings: Vec<String>,
    /// `--fail-on-regression`: each regression is a failure of its item.
    pub fail: bool,
}

impl BaselineComparison {
    /// For the terminal: a line saying what was compared, a line per
    /// regression, the items only one report has, and the warnings.
    pub fn summary(&self) -> Vec<String> {
        let against = format!("the baseline {} (commit {})", self.file, self.commit);
        let mut out = Vec::new();
        if self.regressions.is_empty() {
            out.push(format!("no figure worse than {against}"));
        } else {
            out.push(format!(
                "{} worse than {against}{}:",
                figures(self.regressions.len()),
                if self.fail {
                    ", each a failure (--fail-on-regression)"
                } else {
                    ""
                }
            ));
            for r in &self.regressions {
                out.push(format!("  {}: {}: {}", r.item(), r.figure.name(), r.detail));
            }
        }
        for (items, whose) in [
            (&self.only_here, "this run"),
            (&self.only_baseline, "the baseline"),
        ] {
            if !items.is_empty() {
                out.push(format!(
                    "  only in {whose} (not compared): {} items: {}",
                    items.len(),
                    list(items, 6)
                ));
            }
        }
        out.extend(self.warnings.iter().map(|w| format!("  warning: {w}")));
        out
    }

    /// The regressions of one row of the table: `path` of `prompt` of
    /// `model` against llama.cpp (`against` None) or against a path.
    pub fn of(
        &self,
        model: &str,
        prompt: &str,
        path: Path,
        against: Option<Path>,
    ) -> impl Iterator<Item = &Regression> {
        let (model, prompt) = (model.to_string(), prompt.to_string());
        self.regressions.iter().filter(move |r| {
            r.model == model && r.prompt == prompt && r.path == path && r.against == against
        })
    }
}

/// `1 figure`, `3 figures`.
pub fn figures(n: usize) -> String {
    if n == 1 {
        "1 figure".into()
    } else {
        format!("{n} figures")
    }
}

/// The first `n` of `items`, joined, and how many more.
fn list(items: &[String], n: usize) -> String {
    let mut s = items[..items.len().min(n)].join(", ");
    if items.len() > n {
        s += &format!(", and {} more", items.len() - n);
    }
    s
}

/// A figure that got worse: which, baseline, now, and the line saying so.
pub type Found = (Figure, f64, f64, String);

pub fn cross_regressions(baseline: &CrossResult, now: &CrossResult) -> Vec<Found> {
    let mut out = Vec::new();
    if let (Some(b), Some(n)) = (&baseline.taps, &now.taps) {
        out.extend(taps_regressions(b, n));
    }
    out.extend(logits_regressions(&baseline.logits, &now.logits));
    out
}

/// Logits NMSE, KLD mean and max, top-1 agreement.
pub fn logits_regressions(baseline: &LogitsResult, now: &LogitsResult) -> Vec<Found> {
    let mut out = Vec::new();
    for (figure, tol, b, n, what) in [
        (
            Figure::LogitsNmse,
            LOGITS_NMSE,
            baseline.nmse,
            now.nmse,
            "last-position logits NMSE",
        ),
        (
            Figure::KldMean,
            KLD_MEAN,
            baseline.kld.mean,
            now.kld.mean,
            "KLD mean",
        ),
        (
            Figure::KldMax,
            KLD_MAX,
            baseline.kld.max,
            now.kld.max,
            "KLD max",
        ),
    ] {
        if tol.worse(b, n) {
            out.push((
                figure,
                b,
                n,
                format!(
                    "{what} {} against {} in the baseline (tolerance {})",
                    sci(n),
                    sci(b),
                    tol.describe()
                ),
            ));
        }
    }
    if top1_worse(
        (baseline.top1_agree, baseline.positions),
        (now.top1_agree, now.positions),
    ) {
        out.push((
            Figure::Top1,
            baseline.top1_rate(),
            now.top1_rate(),
            format!(
                "top-1 agreement {}/{} against {}/{} in the baseline",
                now.top1_agree, now.positions, baseline.top1_agree, baseline.positions
            ),
        ));
    }
    out
}

/// The corpus's KLD mean and p99, and its top-1 agreement.
pub fn corpus_regressions(baseline: &CorpusResult, now: &CorpusResult) -> Vec<Found> {
    let mut out = Vec::new();
    for (figure, tol, b, n, what) in [
        (
            Figure::KldMean,
            KLD_MEAN,
            baseline.kld_mean,
            now.kld_mean,
            "corpus KLD mean",
        ),
        (
            Figure::KldP99,
            KLD_P99,
            baseline.kld_p99,
            now.kld_p99,
            "corpus KLD p99",
        ),
    ] {
        if tol.worse(b, n) {
            out.push((
                figure,
                b,
                n,
                format!(
                    "{what} {} against {} in the baseline (tolerance {})",
                    sci(n),
                    sci(b),
                    tol.describe()
                ),
            ));
        }
    }
    let agree = |c: &CorpusResult| ((c.top1 * c.positions as f64).round() as usize, c.positions);
    if top1_worse(agree(baseline), agree(now)) {
        out.push((
            Figure::Top1,
            baseline.top1,
            now.top1,
            format!(
                "corpus top-1 agreement {}/{} against {}/{} in the baseline",
                agree(now).0,
                now.positions,
                agree(baseline).0,
                baseline.positions
            ),
        ));
    }
    out
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

/// Fewer agreeing greedy steps, of the steps both runs compared: the
/// line saying so, or None.
pub fn greedy_regression(baseline: &GreedyResult, now: &GreedyResult) -> Option<String> {
    let held_to = baseline.agree.min(now.compared);
    (now.agree < held_to).then(|| {
        format!(
            "greedy continuation agrees for {} step(s) against {} in the baseline",
            now.agree, baseline.agree
        )
    })
}

/// The tap NMSE regressions (one for all taps worse, the worst named) and
/// an earlier first divergence.
pub fn taps_regressions(baseline: &TapsResult, now: &TapsResult) -> Vec<Found> {
    let mut out = Vec::new();
    let old: HashMap<(&str, Option<usize>), &TapRow> = baseline
        .rows
        .iter()
        .map(|r| ((r.name.as_str(), r.layer), r))
        .collect();
    let worse: Vec<(&TapRow, &TapRow)> = now
        .rows
        .iter()
        .filter_map(|n| {
            let b = *old.get(&(n.name.as_str(), n.layer))?;
            TAP_NMSE.worse(b.nmse, n.nmse).then_some((b, n))
        })
        .collect();
    // The worst: the largest growth over the (floored) baseline.
    let growth = |(b, n): &(&TapRow, &TapRow)| {
        if n.nmse.is_nan() {
            f64::INFINITY
        } else {
            n.nmse / b.nmse.max(TAP_NMSE.floor)
        }
    };
    if let Some(w) = worse.iter().max_by(|x, y| growth(x).total_cmp(&growth(y))) {
        let (b, n) = *w;
        out.push((
            Figure::TapNmse,
            b.nmse,
            n.nmse,
            format!(
                "{} of {} taps above {} their baseline NMSE; the worst {}: {} against {}",
                worse.len(),
                now.rows.len(),
                TAP_NMSE.describe(),
                tap_label(n),
                sci(n.nmse),
                sci(b.nmse)
            ),
        ));
    }
    if let Some(n) = &now.first_divergence {
        let at = |t: &TapsResult, d: &TapRow| t.rows.iter().position(|r| r == d);
        let b = baseline.first_divergence.as_ref();
        let earlier = match (at(now, n), b.and_then(|d| at(baseline, d))) {
            (Some(i), Some(j)) => i < j,
            (_, None) => b.is_none(),
            (None, Some(_)) => false,
        };
        if earlier {
            let layer = |d: &TapRow| d.layer.map_or(f64::NAN, |l| l as f64);
            out.push((
                Figure::FirstDivergence,
                b.map_or(f64::NAN, layer),
                layer(n),
                format!(
                    "first divergence at {} (NMSE {} > {}); the baseline's {}",
                    tap_label(n),
                    sci(n.nmse),
                    sci(n.limit),
                    b.map_or("none".to_string(), |d| format!("at {}", tap_label(d)))
                ),
            ));
        }
    }
    out
}

/// `Qcur-0`, or `result_norm` for a tap outside the layers.
fn tap_label(r: &TapRow) -> String {
    match r.layer {
        Some(l) => format!("{}-{l}", r.name),
        None => r.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::checks::greedy::Outcome;
    use crate::compare::sample;

    #[test]
    fn worse_beyond_the_tolerance_only() {
        // +10%: 1.09x is within, 1.11x is not.
        assert!(!KLD_MEAN.worse(1e-3, 1.09e-3));
        assert!(KLD_MEAN.worse(1e-3, 1.11e-3));
        assert!(!KLD_MAX.worse(1e-2, 1.24e-2));
        assert!(KLD_MAX.worse(1e-2, 1.26e-2));
        assert!(!TAP_NMSE.worse(1e-4, 1.9e-4));
        assert!(TAP_NMSE.worse(1e-4, 2.1e-4));
        // Better is never worse.
        assert!(!LOGITS_NMSE.worse(1e-2, 1e-5));
        // A zero baseline is held to the floor, not to 0.
        assert!(!TAP_NMSE.worse(0.0, 1.5e-12));
        assert!(TAP_NMSE.worse(0.0, 3e-12));
        assert!(!KLD_MEAN.worse(0.0, 1e-6));
        assert!(KLD_MEAN.worse(0.0, 2e-6));
        // NaN now is worse; a NaN baseline holds nothing.
        assert!(LOGITS_NMSE.worse(1e-3, f64::NAN));
        assert!(!LOGITS_NMSE.worse(f64::NAN, 1.0));
        assert_eq!(KLD_MEAN.describe(), "+10% (floor 1e-6)");
        assert_eq!(TAP_NMSE.describe(), "2x (floor 1e-12)");
    }

    #[test]
    fn fewer_agreeing_positions_and_steps() {
        assert!(top1_worse((5, 5), (4, 5)));
        assert!(!top1_worse((4, 5), (5, 5)));
        assert!(!top1_worse((5, 5), (5, 5)));
        // Rates when the positions differ: 9/10 against 18/20 is the same.
        assert!(!top1_worse((9, 10), (18, 20)));
        assert!(top1_worse((9, 10), (17, 20)));
        assert!(!top1_worse((0, 0), (0, 3)));
        let g = |agree, compared| GreedyResult {
            reference_len: 32,
            compared,
            agree,
            outcome: Outcome::Agree,
            mismatch: None,
            ours: Vec::new(),
        };
        assert!(greedy_regression(&g(5, 32), &g(4, 32)).is_some());
        assert!(greedy_regression(&g(5, 32), &g(5, 32)).is_none());
        // Only the steps both compared: 2 of 2 against 5 of 32 is not worse.
        assert!(greedy_regression(&g(5, 32), &g(2, 2)).is_none());
        assert!(greedy_regression(&g(2, 2), &g(1, 32)).is_some());
    }

    #[test]
    fn taps_worse_and_an_earlier_first_divergence() {
        let p = &sample::report().models[0].prompts;
        let (cpu, gpu) = (
            p[0].checks.get::<TapsResult>().unwrap(),
            p[1].checks.get::<TapsResult>().unwrap(),
        );
        assert!(taps_regressions(cpu, cpu).is_empty());
        // gpu's taps are 200x cpu's and diverge where cpu does not.
        let found = taps_regressions(cpu, gpu);
        let figures: Vec<Figure> = found.iter().map(|f| f.0).collect();
        assert_eq!(figures, [Figure::TapNmse, Figure::FirstDivergence]);
        assert!(
            found[0].3.starts_with("9 of 10 taps above 2x"),
            "{}",
            found[0].3
        );
        assert!(found[1].3.contains("the baseline's none"), "{}", found[1].3);
        // The other way round: better, nothing.
        assert!(taps_regressions(gpu, cpu).is_empty());
        // Divergence earlier than the baseline's.
        let mut later = gpu.clone();
        later.first_divergence = Some(later.rows[7].clone());
        let found = taps_regressions(&later, gpu);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, Figure::FirstDivergence);
        // Layers 2 and 1.
        assert_eq!((found[0].1, found[0].2), (2.0, 1.0));
        assert!(taps_regressions(gpu, &later).is_empty());
    }

    #[test]
    fn corpus_figures_regress_by_their_rules() {
        let base = CorpusResult {
            id: "corpus:t".into(),
            text: "/t".into(),
            source: "test".into(),
            n_ctx: 512,
            chunks: 1,
            positions: 255,
            kld_mean: 3e-3,
            kld_p99: 1.4e-2,
            kld_max: 2e-2,
            top1: 237.0 / 255.0,
            ppl: 16.4,
            ppl_base: 16.3,
            tokens_match: Some(true),
            limits: None,
        };
        assert!(corpus_regressions(&base, &base).is_empty());
        let mut now = base.clone();
        now.kld_mean = 3.2e-3; // +7%: within
        now.kld_p99 = 1.8e-2; // +29%: worse
        now.top1 = 236.0 / 255.0; // one position fewer
        let found: Vec<Figure> = corpus_regressions(&base, &now)
            .into_iter()
            .map(|f| f.0)
            .collect();
        assert_eq!(found, vec![Figure::KldP99, Figure::Top1]);
    }
}
