//! The checks of a comparison, each a measure of one prompt on one path (or
//! of one model) against llama.cpp's capture or another path, held to the
//! limits of `ci/thresholds.toml` ([`thresholds`]).
//!
//! A check is a result type that implements [`Check`] (what it measures,
//! its limit keys, its calibration and baseline rules, its failures and its
//! one-cell summary) and one line of [`registry`]; a report holds a list of
//! results ([`Checks`]), written to JSON under each check's key.
//!
//! Adding a check: its file here (the result type, how it is measured, its
//! `impl Check`), its line in [`registry`], and where the run measures it
//! (`run/`).

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

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::compare::Failure;
pub use registry::{CheckResult, Checks, ModelLevel, PromptLevel, Registered};
use thresholds::Limits;

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
    /// How `harness calibrate` sets those limits.
    const CALIBRATION: &'static str;
    /// What `--baseline` holds it to (the rules of
    /// [`crate::compare::report::regression`]).
    const BASELINE: &'static str;
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

    /// A model-level check's row in the table: its label (its key by
    /// default) and whether the result passes.
    const LABEL: &'static str = Self::KEY;
    fn passed(&self) -> bool {
        true
    }
}
