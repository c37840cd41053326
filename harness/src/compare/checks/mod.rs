//! The checks of a comparison, each a measure of one prompt on one path (or
//! of one model) against llama.cpp's capture or another path, held to the
//! limits of `ci/thresholds.toml` ([`thresholds`]).
//!
//! A check is a result type that implements [`Check`] (what it measures,
//! its limit keys, its failures, its calibration rule, its baseline rule
//! and its one-cell summary) and one line of [`registry`]; a report holds
//! a list of results ([`Checks`]), written to JSON under each check's key.
//! `harness calibrate` (`compare::calibrate`) and `--baseline`
//! (`compare::report::baseline`) are drivers that ask every registered
//! check for its rule; the rules' shared arithmetic is in [`calibration`]
//! and [`tolerance`].
//!
//! Adding a check: its file here (the result type, how it is measured, its
//! `impl Check`), its `mod` line and its line in the registry below, and
//! where the run measures it (`run/`); with limits, also their field in
//! [`thresholds::Limits`] (and [`thresholds::KEYS`]) and their values in
//! `ci/thresholds.toml`.

pub mod calibration;
pub mod corpus;
pub mod cross;
pub mod greedy;
pub mod logits;
pub mod profile;
pub mod registry;
pub mod routing;
pub mod sampling;
pub mod sink;
pub mod split;
pub mod taps;
pub mod thresholds;
pub mod tokens;
pub mod tolerance;

use std::borrow::Cow;
use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::ser::SerializeMap;
use serde::Serialize;

use crate::compare::{Failure, Path};
use calibration::{Drafted, Rules, Worst};
use registry::Entry;
pub use registry::{Checks, ModelLevel, PromptLevel, Registered};
use thresholds::Limits;
use tolerance::{Figure, Found};

// Every check, in the order a report writes them: its module (above) and
// its line here ([`registry::registry!`]).
registry::registry! {
    Tokens(tokens::PromptTokens),
    Taps(taps::TapsResult),
    Logits(logits::LogitsResult),
    Greedy(greedy::GreedyResult),
    Vs(cross::CrossResult),
    Split(split::SplitResult),
    Corpus(corpus::CorpusResult),
    Tokenizer(tokens::CorpusCheck),
    Chat(tokens::ChatCheck),
    Sampling(sampling::SamplingCheck),
}

/// Where a check's result sits in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// One per model, prompt and path ([`crate::compare::report::PromptReport`]).
    Prompt,
    /// One per model ([`crate::compare::report::ModelReport`]).
    Model,
}

/// One check: its result type, what it measures and how it is judged.
pub trait Check: Clone + Debug + Serialize + DeserializeOwned + Registered {
    /// Its key in the JSON report (and the table's, JUnit's and HTML's
    /// name for it).
    const KEY: &'static str;
    /// Where its result sits.
    const LEVEL: Level;
    /// What it measures, in one line.
    const MEASURES: &'static str;
    /// Its limits' keys in `ci/thresholds.toml` (none: exact).
    const LIMIT_KEYS: &'static [&'static str];
    /// The names its failures go under (JUnit has a case for each where
    /// it ran): its key, or several (the logits: `logits_nmse`, `kld_mean`,
    /// `kld_max`, `top1`).
    const FAILURES: &'static [&'static str] = &[Self::KEY];
    /// Whether a report without this result writes `null` under its key
    /// (the checks every report has had) rather than leaving the key out.
    const NULL_WHEN_ABSENT: bool;

    /// The failures this result makes against `limits`, each with its
    /// check's name and a one-line detail (where: the prompt and path of
    /// the report that holds it).
    fn failures(&self, _limits: &Limits) -> Vec<Failure> {
        Vec::new()
    }

    /// This result in one cell of a table.
    fn summary(&self) -> String;

    /// `harness calibrate`: the limits this check proposes for its
    /// [`Check::LIMIT_KEYS`] in `entry`, drawn from what it measured there
    /// by its headroom rule, each with its measurement and where in a
    /// comment. None by default: an exact check, or one calibrated as
    /// other checks' figures ([`Check::calibrated_as`]). Errors: a figure
    /// that is not finite (a broken path cannot be calibrated).
    fn calibrate(_entry: &LimitsEntry) -> Result<Vec<Drafted>, String> {
        Ok(Vec::new())
    }

    /// The results whose rules calibrate this one, in the entry of its
    /// path against [`Check::against`] (`gpu-vs-cpu`): the cross check's
    /// taps and logits.
    fn calibrated_as(&self) -> Option<Results> {
        None
    }

    /// The path this result was measured against (None: llama.cpp's
    /// capture). A result against a path is an item of its own for
    /// `--baseline` (`gpu~cpu`).
    fn against(&self) -> Option<Path> {
        None
    }

    /// The figures `--baseline` holds it to ([`Check::regressions`]).
    const FIGURES: &'static [Figure] = &[];

    /// `--baseline`: the figures of this result worse than `baseline`'s
    /// (the same check of the same item in an earlier report), each by
    /// its rule. None by default: an exact check is not compared.
    fn regressions(&self, _baseline: &Self) -> Vec<Found> {
        Vec::new()
    }

    /// A model-level check's row in the table: its label (its key by
    /// default) and whether the result passes.
    const LABEL: &'static str = Self::KEY;
    fn passed(&self) -> bool {
        true
    }
}

/// One entry of the limits `harness calibrate` draws, `[model.key]`: what
/// was measured on one path (every `hybrid:N` and expert-cache path is
/// `hybrid`), or on one path against the run's first (`gpu-vs-cpu`).
pub struct LimitsEntry<'a> {
    pub model: &'a str,
    pub key: &'a str,
    pub rules: &'a Rules,
    pub items: Vec<Measured<'a>>,
}

/// What one prompt measured on one path.
pub struct Measured<'a> {
    pub prompt: &'a str,
    pub path: Path,
    pub checks: Cow<'a, Checks<PromptLevel>>,
}

/// Results as an item of a limits entry holds them
/// ([`Check::calibrated_as`]).
#[derive(Clone, Debug, Default)]
pub struct Results(pub Checks<PromptLevel>);

impl Results {
    pub fn put<C: Check>(&mut self, result: C) {
        self.0.put(result);
    }
}

impl Measured<'_> {
    /// Check `C`'s result here.
    pub fn get<C: Check>(&self) -> Option<&C> {
        self.checks.get::<C>()
    }

    /// Where, in a comment: the prompt, and the path unless cpu or gpu.
    pub fn at(&self) -> String {
        match self.path {
            Path::Cpu | Path::Gpu => self.prompt.to_string(),
            path => format!("{} {path}", self.prompt),
        }
    }
}

impl<'a> LimitsEntry<'a> {
    /// `model.key`: its table's name.
    pub fn table(&self) -> String {
        format!(
            "{}.{}",
            calibration::toml_key(self.model),
            calibration::toml_key(self.key)
        )
    }

    /// Check `C`'s results here, each with where it was measured.
    pub fn results<'s, C: Check + 's>(&'s self) -> impl Iterator<Item = (&'s C, &'s Measured<'a>)> {
        self.items.iter().filter_map(|m| Some((m.get::<C>()?, m)))
    }

    /// `Ok` for a finite figure; else the error saying this entry cannot
    /// be calibrated.
    pub fn finite(&self, what: &str, w: &Worst) -> Result<(), String> {
        if w.value.is_finite() {
            Ok(())
        } else {
            Err(format!(
                "{} {}: {what} measured {} ({}): a path that gives this cannot be calibrated",
                self.model, self.key, w.value, w.at
            ))
        }
    }
}
