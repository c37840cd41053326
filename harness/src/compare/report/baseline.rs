//! `harness compare --baseline OLD.json`: every figure of this run held
//! against the same item's figure in an earlier report, by each check's
//! rule ([`Check::regressions`](crate::compare::checks::Check::regressions);
//! [`super::regression`]), to see what got worse even where it is still
//! within its limit. Items are matched by model, prompt and path; items
//! present in only one report are listed, not failed.

use std::collections::HashMap;

use super::regression::{item_key, BaselineComparison, Regression, VALIDATION};
use super::{PromptReport, Report};
use crate::compare::checks::tolerance::Found;
use crate::compare::{Failure, Path};

/// Reads a baseline report (`compare --json`); the error is one line.
pub fn load(file: &std::path::Path) -> Result<Report, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    Report::from_json(&text).map_err(|e| {
        format!(
            "{}: not a compare --json report: {}",
            file.display(),
            e.lines().next().unwrap_or_default()
        )
    })
}

/// Compares `report` with `baseline` and records the result in it
/// ([`Report::baseline`]); with `fail`, each regression is also a failure
/// ("regression") of its prompt and path. Returns the warnings (other
/// reference data or limits: the figures are compared anyway).
pub fn apply(report: &mut Report, baseline: &Report, file: &str, fail: bool) -> Vec<String> {
    let (regressions, only_here, only_baseline) = compare(report, baseline);
    let warnings = warnings(report, baseline, file);
    if fail {
        for r in &regressions {
            let p = report
                .models
                .iter_mut()
                .flat_map(|m| m.prompts.iter_mut())
                .find(|p| p.model == r.model && p.prompt == r.prompt && p.path == r.path);
            if let Some(p) = p {
                let what = match r.against {
                    Some(a) => format!("against {a}: "),
                    None => String::new(),
                };
                p.failures.push(Failure::new(
                    "regression",
                    format!("{what}{}: {}", r.figure.name(), r.detail),
                ));
            }
        }
    }
    report.baseline = Some(BaselineComparison {
        file: file.to_string(),
        commit: baseline.provenance.commit.clone(),
        regressions,
        only_here,
        only_baseline,
        warnings: warnings.clone(),
        fail,
    });
    warnings
}

/// Why `baseline` may not be comparable with `report`, one line each.
fn warnings(report: &Report, baseline: &Report, file: &str) -> Vec<String> {
    let (a, b) = (&report.provenance, &baseline.provenance);
    let mut out = Vec::new();
    if a.reference_sha256 != b.reference_sha256 {
        out.push(format!(
            "baseline {file} was measured against other reference data (manifest SHA-256 {} against {}); figures compared anyway",
            short(&b.reference_sha256),
            short(&a.reference_sha256)
        ));
    }
    if a.thresholds_sha256 != b.thresholds_sha256 {
        out.push(format!(
            "baseline {file} was judged by other limits (SHA-256 {} against {}); figures compared anyway",
            short(&b.thresholds_sha256),
            short(&a.thresholds_sha256)
        ));
    }
    out
}

fn short(sha: &str) -> &str {
    if sha.is_empty() {
        "none"
    } else {
        &sha[..sha.len().min(12)]
    }
}

/// Every regression of `now` against `baseline`, and the items only one
/// of them has (`model/prompt/path`).
pub fn compare(now: &Report, baseline: &Report) -> (Vec<Regression>, Vec<String>, Vec<String>) {
    let index = |r: &Report| -> HashMap<String, PromptReport> {
        r.models
            .iter()
            .flat_map(|m| &m.prompts)
            .map(|p| (item_key(&p.model, &p.prompt, p.path, None), p.clone()))
            .collect()
    };
    let (old, new) = (index(baseline), index(now));
    let mut regressions = Vec::new();
    let mut only_here = Vec::new();
    for p in now.models.iter().flat_map(|m| &m.prompts) {
        let key = item_key(&p.model, &p.prompt, p.path, None);
        match old.get(&key) {
            Some(b) => regressions.extend(prompt_regressions(b, p)),
            None => only_here.push(key),
        }
    }
    let only_baseline = baseline
        .models
        .iter()
        .flat_map(|m| &m.prompts)
        .map(|p| item_key(&p.model, &p.prompt, p.path, None))
        .filter(|k| !new.contains_key(k))
        .collect();
    (regressions, only_here, only_baseline)
}

/// The regressions of one prompt on one path: those of each check
/// against llama.cpp (in the registry's order), then more validation
/// messages, then those of each check against another path (that path
/// against the first: an item of its own).
pub fn prompt_regressions(baseline: &PromptReport, now: &PromptReport) -> Vec<Regression> {
    let mut found: Vec<(Option<Path>, Found)> = Vec::new();
    let of_checks = |against_path: bool, found: &mut Vec<(Option<Path>, Found)>| {
        for n in now.checks.iter() {
            if n.against().is_some() != against_path {
                continue;
            }
            if let Some(b) = baseline.checks.iter().find(|b| b.key() == n.key()) {
                found.extend(n.regressions(b).into_iter().map(|f| (n.against(), f)));
            }
        }
    };
    of_checks(false, &mut found);
    if let (Some(b), Some(n)) = (baseline.validation_messages, now.validation_messages) {
        if n > b {
            found.push((
                None,
                Found {
                    figure: VALIDATION,
                    baseline: b as f64,
                    now: n as f64,
                    detail: format!("{n} validation messages against {b}"),
                },
            ));
        }
    }
    of_checks(true, &mut found);
    found
        .into_iter()
        .map(|(against, f)| Regression {
            model: now.model.clone(),
            prompt: now.prompt.clone(),
            path: now.path,
            against,
            figure: f.figure,
            baseline: f.baseline,
            now: f.now,
            detail: f.detail,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::checks::cross::CrossResult;
    use crate::compare::checks::greedy::GreedyResult;
    use crate::compare::checks::logits::{LogitsResult, LOGITS_NMSE};
    use crate::compare::sample;

    #[test]
    fn a_report_against_itself_has_no_regressions() {
        let mut r = sample::report();
        let same = r.clone();
        let warnings = apply(&mut r, &same, "old.json", true);
        assert!(warnings.is_empty());
        let b = r.baseline.as_ref().unwrap();
        assert!(b.regressions.is_empty() && b.only_here.is_empty() && b.only_baseline.is_empty());
        assert_eq!(r.failures().len(), same.failures().len());
    }

    #[test]
    fn regressions_fail_only_when_asked_and_new_items_are_listed() {
        let baseline = sample::report();
        let mut now = baseline.clone();
        let gpu = &mut now.models[0].prompts[1];
        gpu.checks.get_mut::<LogitsResult>().unwrap().kld.mean *= 1.5;
        gpu.checks.get_mut::<GreedyResult>().unwrap().agree = 1;
        now.models[0].prompts[0].prompt = "other".into();
        now.provenance.thresholds_sha256 = "new".into();

        let mut quiet = now.clone();
        let warnings = apply(&mut quiet, &baseline, "old.json", false);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("other limits"), "{}", warnings[0]);
        let b = quiet.baseline.as_ref().unwrap();
        let figures: Vec<&str> = b.regressions.iter().map(|r| r.figure.name()).collect();
        assert_eq!(figures, ["kld_mean", "greedy"]);
        assert_eq!(b.regressions[0].item(), "smol/capital/gpu");
        let shown = |r: &Regression| (r.show(r.baseline), r.show(r.now));
        assert_eq!(
            shown(&b.regressions[1]),
            ("4 steps".into(), "1 steps".into())
        );
        assert_eq!(b.only_here, ["smol/other/cpu"]);
        assert_eq!(b.only_baseline, ["smol/capital/cpu"]);
        assert_eq!(quiet.failures().len(), now.failures().len());

        let mut loud = now.clone();
        apply(&mut loud, &baseline, "old.json", true);
        let added: Vec<String> = loud
            .failures()
            .iter()
            .filter(|(_, f)| f.check == "regression")
            .map(|(at, f)| format!("{at}: {}", f.detail))
            .collect();
        assert_eq!(added.len(), 2, "{added:?}");
        assert!(added[0].starts_with("smol/capital/gpu: kld_mean: KLD mean"));
    }

    #[test]
    fn a_path_against_the_first_is_its_own_item() {
        let baseline = sample::report();
        let mut now = baseline.clone();
        let vs = now.models[0].prompts[1]
            .checks
            .get_mut::<CrossResult>()
            .unwrap();
        vs.logits.nmse *= 3.0;
        let (regressions, _, _) = compare(&now, &baseline);
        assert_eq!(regressions.len(), 1);
        assert_eq!(regressions[0].item(), "smol/capital/gpu~cpu");
        assert_eq!(regressions[0].figure, LOGITS_NMSE);
    }

    #[test]
    fn an_unreadable_baseline_is_one_line() {
        let dir = std::env::temp_dir().join(format!("baseline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"models\": 3,\n\"x\": [}").unwrap();
        for f in [bad.clone(), dir.join("missing.json")] {
            let e = load(&f).unwrap_err();
            assert!(
                !e.contains('\n') && e.contains(&f.display().to_string()),
                "{e}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
