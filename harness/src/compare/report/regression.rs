//! What counts as worse than a baseline (`harness compare --baseline
//! OLD.json`, [`super::baseline`]): the rules, one figure of one item at a
//! time, and what a comparison found ([`BaselineComparison`], kept in the
//! report).
//!
//! An item is one model × prompt × path (against llama.cpp) or one path
//! against the run's first path ("gpu~cpu"); items are matched by model,
//! prompt and path. What counts as worse is each check's rule
//! ([`Check::regressions`], the figures its [`Check::FIGURES`] lists),
//! and more Vulkan validation messages ([`VALIDATION`]). A ratio is taken
//! against `max(baseline, floor)`: a baseline of 0 (a bit-identical
//! tensor) is held to the floor, not to 0. The exact checks (tokens,
//! tokenizer corpus, chat renders, end-of-generation set) and the timings
//! are not compared. Items present in only one report are listed, not
//! failed.
//!
//! [`Check::regressions`]: crate::compare::checks::Check::regressions
//! [`Check::FIGURES`]: crate::compare::checks::Check::FIGURES

use serde::{Deserialize, Deserializer, Serialize};

use crate::compare::checks::registry;
use crate::compare::checks::tolerance::{Figure, Reads, Rule};
use crate::compare::Path;

/// The Vulkan validation messages of a prompt's run (the report's count,
/// not a check's figure): more is worse.
pub const VALIDATION: Figure = Figure {
    name: "validation",
    reads: Reads::Count,
    rule: Rule::Words("more messages"),
};

/// A figure read back by its name: a check's ([`registry::figure`]) or
/// [`VALIDATION`].
fn figure_named<'de, D: Deserializer<'de>>(d: D) -> Result<Figure, D::Error> {
    let name = String::deserialize(d)?;
    registry::figure(&name)
        .or((name == VALIDATION.name).then_some(VALIDATION))
        .ok_or_else(|| serde::de::Error::custom(format!("unknown figure `{name}`")))
}

/// One figure of one item worse than in the baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Regression {
    pub model: String,
    pub prompt: String,
    pub path: Path,
    /// For a path against the run's first path: that path.
    pub against: Option<Path>,
    #[serde(deserialize_with = "figure_named")]
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
        self.figure.show(value)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::checks::tolerance::KLD_MEAN;
    use crate::compare::checks::ALL;

    #[test]
    fn a_regression_reads_back_its_figure_by_name() {
        let r = Regression {
            model: "m".into(),
            prompt: "p".into(),
            path: Path::Gpu,
            against: Some(Path::Cpu),
            figure: KLD_MEAN,
            baseline: 1e-3,
            now: 2e-3,
            detail: "d".into(),
        };
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"figure\":\"kld_mean\""), "{json}");
        assert_eq!(serde_json::from_str::<Regression>(&json).unwrap(), r);
        let v = Regression {
            figure: VALIDATION,
            ..r.clone()
        };
        let back: Regression = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!((back.figure, back.show(3.0)), (VALIDATION, "3".into()));
        let bad = json.replace("kld_mean", "kld_nope");
        let e = serde_json::from_str::<Regression>(&bad).unwrap_err();
        assert!(e.to_string().contains("unknown figure `kld_nope`"), "{e}");
    }

    /// A name is one figure: checks that share a figure share its rule.
    #[test]
    fn a_figure_name_has_one_rule() {
        let all: Vec<Figure> = ALL.iter().flat_map(|e| e.figures).copied().collect();
        for f in &all {
            assert_eq!(registry::figure(f.name), Some(*f), "{}", f.name);
            assert_ne!(f.name, VALIDATION.name);
        }
    }
}
