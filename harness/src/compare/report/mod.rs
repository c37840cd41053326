//! What a comparison found: the [`Report`] (also written as JSON), its
//! terminal table and the list of failing checks.

pub mod baseline;
pub mod headline;
pub mod html;
pub mod junit;
pub mod merge;
pub mod plots;
pub mod provenance;
pub mod regression;

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::compare::checks::corpus::CorpusResult;
use crate::compare::checks::cross::CrossResult;
use crate::compare::checks::greedy::{GreedyResult, Outcome};
use crate::compare::checks::logits::LogitsResult;
use crate::compare::checks::split::SplitResult;
use crate::compare::checks::taps::TapsResult;
use crate::compare::checks::tokens::PromptTokens;
use crate::compare::checks::{Check, Checks, ModelLevel, PromptLevel};
use crate::compare::plan::matrix::Shard;

use crate::compare::{Failure, Path, Paths};
use crate::metrics::{self, Summary};
use crate::reference::format::ManifestModel;
use regression::BaselineComparison;

use crate::compare::sci;
pub use provenance::Provenance;

/// Everything one `compare` run found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub reference_dir: String,
    /// The thresholds file.
    pub thresholds: String,
    /// As `--paths` gave them (`"all"`: each model's are in its report).
    pub paths: Paths,
    /// Where it came from: what `harness merge` requires to be the same in
    /// every shard.
    #[serde(default)]
    pub provenance: Provenance,
    /// This run's slice of the items (`--shard K/N`); None: all of them.
    #[serde(default)]
    pub shard: Option<Shard>,
    /// Every item of the run the options describe (all shards together),
    /// in run order ([`Item::key`](crate::compare::plan::matrix::Item::key)).
    #[serde(default)]
    pub items: Vec<String>,
    /// The items this run was given (its shard's, or all).
    #[serde(default)]
    pub ran: Vec<String>,
    pub models: Vec<ModelReport>,
    /// What `--baseline` found: the figures worse than an earlier report's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineComparison>,
    /// Wall time of the whole run.
    #[serde(deserialize_with = "crate::nan::f64")]
    pub seconds: f64,
}

/// One model: its model-level checks and one [`PromptReport`] per prompt
/// and path.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModelReport {
    pub id: String,
    pub architecture: String,
    pub file: String,
    /// Why it was not run (not a failure), e.g. an architecture the engine
    /// does not implement.
    pub skipped: Option<String>,
    /// The paths it ran on (in order; the first is the others' reference).
    pub paths: Vec<Path>,
    /// Model-level failures: the file, the tokenizer corpus, the chat
    /// renders, a skip of a model asked for by name.
    pub failures: Vec<Failure>,
    /// The model-level checks' results (tokenizer corpus, chat renders,
    /// sampler), each under its key.
    #[serde(flatten)]
    pub checks: Checks<ModelLevel>,
    pub prompts: Vec<PromptReport>,
    /// Wall time of the text checks (the tokenizer corpus, chat renders).
    #[serde(default, deserialize_with = "crate::nan::f64")]
    pub text_seconds: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub seconds: f64,
}

impl ModelReport {
    pub fn new(entry: &ManifestModel) -> ModelReport {
        ModelReport {
            id: entry.id.clone(),
            architecture: entry.architecture.clone(),
            file: entry.file.clone(),
            skipped: None,
            paths: Vec::new(),
            failures: Vec::new(),
            checks: Checks::default(),
            prompts: Vec::new(),
            text_seconds: 0.0,
            seconds: 0.0,
        }
    }

    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.prompts.iter().all(PromptReport::passed)
    }
}

/// One prompt of one model on one path.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PromptReport {
    pub model: String,
    pub prompt: String,
    pub path: Path,
    pub n_tokens: usize,
    /// The checks' results (tokens, taps, logits, greedy, this path
    /// against the first, ...: [`crate::compare::checks::registry`]), each
    /// under its key.
    #[serde(flatten)]
    pub checks: Checks<PromptLevel>,
    /// Messages from the Vulkan validation layer during this prompt (None:
    /// no GPU on this path, or validation off).
    pub validation_messages: Option<usize>,
    /// The CPU path's profile: "exact", or "calibrated: why" (None on
    /// other paths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub failures: Vec<Failure>,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub seconds: f64,
}

impl PromptReport {
    pub fn new(model: &str, prompt: &str, path: Path, n_tokens: usize) -> PromptReport {
        PromptReport {
            model: model.to_string(),
            prompt: prompt.to_string(),
            path,
            n_tokens,
            checks: Checks::default(),
            validation_messages: None,
            profile: None,
            failures: Vec::new(),
            seconds: 0.0,
        }
    }

    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

impl Report {
    pub fn passed(&self) -> bool {
        self.models.iter().all(ModelReport::passed)
    }

    /// Every failure with where it happened ("model", "model/prompt/path").
    pub fn failures(&self) -> Vec<(String, &Failure)> {
        let mut out = Vec::new();
        for m in &self.models {
            out.extend(m.failures.iter().map(|f| (m.id.clone(), f)));
            for p in &m.prompts {
                let at = format!("{}/{}/{}", m.id, p.prompt, p.path);
                out.extend(p.failures.iter().map(|f| (at.clone(), f)));
            }
        }
        out
    }

    /// The first divergence of the run ([`headline`]: the earliest tap
    /// over its limit, else the first failing check; None: all passed).
    pub fn first_divergence(&self) -> Option<headline::Headline<'_>> {
        let mut candidates = Vec::new();
        for p in self.models.iter().flat_map(|m| &m.prompts) {
            let ours = p.checks.get::<TapsResult>().map(|t| (None, t));
            let vs = p
                .checks
                .get::<CrossResult>()
                .and_then(|v| v.taps.as_ref().map(|t| (Some(v.against), t)));
            for (against, taps) in ours.into_iter().chain(vs) {
                candidates.push(headline::Candidate {
                    model: &p.model,
                    prompt: &p.prompt,
                    path: p.path,
                    against,
                    taps,
                });
            }
        }
        headline::first_divergence(candidates, self.failures().into_iter().next())
    }

    /// Each item's wall time ([`Item::key`](crate::compare::plan::matrix::Item::key) to
    /// seconds): what `--costs` files hold.
    pub fn item_seconds(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for m in &self.models {
            if m.text_seconds > 0.0 {
                out.push((format!("{}/text", m.id), m.text_seconds));
            }
            for p in &m.prompts {
                out.push((format!("{}/{}/{}", m.id, p.prompt, p.path), p.seconds));
            }
        }
        out
    }

    /// Reads a report written by [`Report::to_json`].
    pub fn from_json(text: &str) -> Result<Report, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// The report as pretty JSON (non-finite numbers become null).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }

    /// The terminal table: one row per model × prompt × path, model-level
    /// rows, per-model totals, then the failing checks.
    pub fn table(&self) -> String {
        let rows = self.table_rows();
        let mut out = String::new();
        write_table(&mut out, &rows);

        let totals: Vec<String> = self.models.iter().flat_map(model_totals).collect();
        if !totals.is_empty() {
            out.push_str("\nPer model and path, over every prompt position (KLD: top-64 + tail bucket, nats):\n");
            for t in totals {
                let _ = writeln!(out, "  {t}");
            }
        }
        let profiles = self.profile_lines();
        if !profiles.is_empty() {
            out.push_str("\nCPU path limits per model:\n");
            for line in profiles {
                let _ = writeln!(out, "  {line}");
            }
        }
        if let Some(b) = &self.baseline {
            out.push('\n');
            for line in b.summary() {
                let _ = writeln!(out, "{line}");
            }
        }
        let failures = self.failures();
        if failures.is_empty() {
            let _ = writeln!(out, "\nall checks passed ({:.1} s)", self.seconds);
        } else {
            if let Some(h) = self.first_divergence() {
                let _ = writeln!(out, "\nfirst divergence: {}", h.line());
            }
            let _ = writeln!(
                out,
                "\n{} failing checks ({:.1} s):",
                failures.len(),
                self.seconds
            );
            for (at, f) in failures {
                let _ = writeln!(out, "  {at}: {}: {}", f.check, f.detail);
            }
        }
        out
    }

    /// Per model run on the CPU path, its profile: exact (held to zero)
    /// or calibrated, with why.
    fn profile_lines(&self) -> Vec<String> {
        self.models
            .iter()
            .filter_map(|m| {
                let p = m.prompts.iter().find_map(|p| p.profile.as_deref())?;
                Some(if p == "exact" {
                    format!(
                        "{}: exact (every tap, the logits and the greedy steps bit-identical)",
                        m.id
                    )
                } else {
                    format!("{}: {p}", m.id)
                })
            })
            .collect()
    }

    /// The rows of the terminal table, its header first: one per model ×
    /// prompt × path (and one per path against the first path), then the
    /// model-level rows (tokenizer corpus, chat renders, skipped); with a
    /// baseline, a last column "vs baseline" (the figures worse, or `new`).
    pub fn table_rows(&self) -> Vec<Vec<String>> {
        let rows = self.check_rows();
        let Some(b) = &self.baseline else {
            return rows.into_iter().map(|(row, _)| row).collect();
        };
        let mut rows = rows.into_iter();
        let mut header = rows.next().expect("the header").0;
        header.push("vs baseline".into());
        std::iter::once(header)
            .chain(rows.map(|(mut row, key)| {
                row.push(match key {
                    None => String::new(),
                    Some((p, against)) => baseline_cell(b, p, against),
                });
                row
            }))
            .collect()
    }

    /// The table's rows without the baseline column, each with the item
    /// the baseline compares there: the prompt and path, and the path it
    /// is against (None: the header, a split row, a model-level row).
    fn check_rows(&self) -> Vec<(Vec<String>, Option<RowItem<'_>>)> {
        let header = [
            "model",
            "prompt",
            "path",
            "tokens",
            "taps",
            "logits NMSE",
            "KLD mean",
            "KLD max",
            "top-1",
            "greedy",
            "result",
        ]
        .map(String::from)
        .to_vec();
        let mut rows = vec![(header, None)];
        for m in &self.models {
            for p in &m.prompts {
                rows.push((prompt_row(p), Some((p, None))));
                if let Some(v) = p.checks.get::<CrossResult>() {
                    rows.push((cross_row(p, v), Some((p, Some(v.against)))));
                }
                if let Some(s) = p.checks.get::<SplitResult>() {
                    rows.push((split_row(p, s), None));
                }
            }
            for c in m.checks.iter() {
                rows.push((model_row(&m.id, c.label(), c.summary(), c.passed()), None));
            }
            if let Some(why) = &m.skipped {
                rows.push((model_row(&m.id, "-", format!("skipped: {why}"), true), None));
            } else if m.prompts.is_empty() && !m.failures.is_empty() {
                rows.push((model_row(&m.id, "-", "not run".into(), false), None));
            }
        }
        rows
    }
}

/// What the baseline compares on a row of the table: a prompt on a path,
/// and the path it is against (None: llama.cpp).
type RowItem<'a> = (&'a PromptReport, Option<Path>);

/// The "vs baseline" cell of a row: `ok`, the figures worse, or `new`
/// (not in the baseline).
fn baseline_cell(b: &BaselineComparison, p: &PromptReport, against: Option<Path>) -> String {
    let key = format!("{}/{}/{}", p.model, p.prompt, p.path);
    if b.only_here.contains(&key) {
        return "new".into();
    }
    let worse: Vec<&str> = b
        .of(&p.model, &p.prompt, p.path, against)
        .map(|r| r.figure.name())
        .collect();
    if worse.is_empty() {
        "ok".into()
    } else {
        format!("WORSE: {}", worse.join(", "))
    }
}

fn model_row(model: &str, what: &str, tokens: String, pass: bool) -> Vec<String> {
    let mut r = vec![model.to_string(), what.to_string(), "-".into(), tokens];
    r.extend(std::iter::repeat_n(String::new(), 6));
    r.push(if pass { "PASS" } else { "FAIL" }.into());
    r
}

fn prompt_row(p: &PromptReport) -> Vec<String> {
    let tokens = p
        .checks
        .get::<PromptTokens>()
        .map_or("?".into(), Check::summary);
    let taps = p
        .checks
        .get::<TapsResult>()
        .map_or("-".into(), Check::summary);
    let (nmse, kmean, kmax, top1) = match (
        p.checks.get::<LogitsResult>(),
        p.checks.get::<CorpusResult>(),
    ) {
        (None, Some(c)) => (
            "-".into(),
            sci(c.kld_mean),
            format!("p99 {}", sci(c.kld_p99)),
            format!("{}/{}", (c.top1 * c.positions as f64).round(), c.positions),
        ),
        (None, None) => Default::default(),
        (Some(l), _) => (
            sci(l.nmse),
            sci(l.kld.mean),
            sci(l.kld.max),
            format!("{}/{}", l.top1_agree, l.positions),
        ),
    };
    let tokens = match p.checks.get::<CorpusResult>() {
        Some(c) => match c.tokens_match {
            Some(true) => "exact".into(),
            Some(false) => "differ".into(),
            None => "?".into(),
        },
        None => tokens,
    };
    let greedy = p
        .checks
        .get::<GreedyResult>()
        .map_or(String::new(), Check::summary);
    vec![
        p.model.clone(),
        p.prompt.clone(),
        p.path.to_string(),
        tokens,
        taps,
        nmse,
        kmean,
        kmax,
        top1,
        greedy,
        if p.passed() { "PASS" } else { "FAIL" }.into(),
    ]
}

/// The row of a path against the run's first path ("gpu~cpu").
fn cross_row(p: &PromptReport, v: &CrossResult) -> Vec<String> {
    let taps = v.summary();
    let l = &v.logits;
    let pass = !p.failures.iter().any(|f| f.check == "vs");
    vec![
        String::new(),
        String::new(),
        format!("{}~{}", p.path, v.against),
        String::new(),
        taps,
        sci(l.nmse),
        sci(l.kld.mean),
        sci(l.kld.max),
        format!("{}/{}", l.top1_agree, l.positions),
        String::new(),
        if pass { "PASS" } else { "FAIL" }.into(),
    ]
}

/// The row of a hybrid path's state at its split against the gpu path's
/// ("hybrid:2@2~gpu": up to layer 2's attn_norm).
fn split_row(p: &PromptReport, s: &SplitResult) -> Vec<String> {
    let taps = s.summary();
    let pass = !p.failures.iter().any(|f| f.check == "split");
    let mut row = vec![String::new(); 11];
    row[2] = format!("{}@{}~{}", p.path, s.layer, s.against);
    row[4] = taps;
    row[10] = if pass { "PASS" } else { "FAIL" }.into();
    row
}

fn write_table(out: &mut String, rows: &[Vec<String>]) {
    let cols = rows[0].len();
    let width: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == cols {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = width[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// Totals of one model, per path: all prompt positions' KLD and top-1, the
/// ranges of tap and logits NMSE, greedy agreement.
pub fn model_totals(m: &ModelReport) -> Vec<String> {
    let mut paths: Vec<Path> = Vec::new();
    for p in &m.prompts {
        if !paths.contains(&p.path) {
            paths.push(p.path);
        }
    }
    paths
        .into_iter()
        .filter_map(|path| {
            let ps: Vec<&PromptReport> = m.prompts.iter().filter(|p| p.path == path).collect();
            let t = totals(&ps)?;
            Some(format!(
                "{} {path}: {} positions, KLD mean {} ± {}, max {}, p99 {}, median {}; top-1 {}/{} ({:.2}%; {} near-ties, {} not); \
                 tap NMSE {}..{}; logits NMSE {}..{}; greedy {} of {} prompts in full, {} near-ties, {} diverged",
                m.id,
                t.kld.count,
                sci(t.kld.mean),
                sci(t.kld.stderr),
                sci(t.kld.max),
                sci(t.kld.p99),
                sci(t.kld.median),
                t.top1,
                t.kld.count,
                100.0 * t.top1 as f64 / t.kld.count.max(1) as f64,
                t.top1_near_ties,
                t.top1_hard,
                sci(t.tap_nmse.0),
                sci(t.tap_nmse.1),
                sci(t.logits_nmse.0),
                sci(t.logits_nmse.1),
                t.greedy[0],
                ps.len(),
                t.greedy[1],
                t.greedy[2],
            ))
        })
        .collect()
}

struct Totals {
    kld: Summary,
    top1: usize,
    top1_near_ties: usize,
    top1_hard: usize,
    tap_nmse: (f64, f64),
    logits_nmse: (f64, f64),
    /// agree, near-tie, diverged
    greedy: [usize; 3],
}

fn range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        if x.is_nan() {
            (f64::NAN, f64::NAN)
        } else {
            (lo.min(x), hi.max(x))
        }
    })
}

fn totals(ps: &[&PromptReport]) -> Option<Totals> {
    let logits: Vec<&LogitsResult> = ps
        .iter()
        .filter_map(|p| p.checks.get::<LogitsResult>())
        .collect();
    if logits.is_empty() {
        return None;
    }
    let klds: Vec<f64> = logits
        .iter()
        .flat_map(|l| l.per_position.iter().map(|p| p.kld))
        .collect();
    let mut greedy = [0; 3];
    for g in ps.iter().filter_map(|p| p.checks.get::<GreedyResult>()) {
        greedy[match g.outcome {
            Outcome::Agree => 0,
            Outcome::NearTie => 1,
            Outcome::Diverged => 2,
        }] += 1;
    }
    Some(Totals {
        kld: metrics::summarize(&klds),
        top1: logits.iter().map(|l| l.top1_agree).sum(),
        top1_near_ties: logits.iter().map(|l| l.top1_near_ties).sum(),
        top1_hard: logits.iter().map(|l| l.top1_hard).sum(),
        tap_nmse: range(
            ps.iter()
                .filter_map(|p| p.checks.get::<TapsResult>())
                .flat_map(|t| t.rows.iter().map(|r| r.nmse)),
        ),
        logits_nmse: range(logits.iter().map(|l| l.nmse)),
        greedy,
    })
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
