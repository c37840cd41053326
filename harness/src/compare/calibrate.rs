//! `harness calibrate`: limits for a model from what its paths measure.
//! Each limits entry `[model.key]` holds what one path measured (every
//! `hybrid:N` and expert-cache path is one `hybrid` entry, the worst over
//! its splits, as the limits' lookup falls back to `hybrid` for any of
//! them), or one path against the run's first (`gpu-vs-cpu`, the results
//! a check is calibrated as: [`Check::calibrated_as`]). Every registered
//! check draws its own limits in each entry by its rule
//! ([`Check::calibrate`]: the worst figure times a headroom factor,
//! default 4, rounded up to 1, 2 or 5 times a power of ten, with the
//! measurement, where it was taken and the factor in a comment), and they
//! are written in the order of [`KEYS`]; the file parses as a
//! `--thresholds` file.
//!
//! [`Check::calibrated_as`]: crate::compare::checks::Check::calibrated_as
//! [`Check::calibrate`]: crate::compare::checks::Check::calibrate

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::compare::checks::thresholds::KEYS;
use crate::compare::checks::{CheckResult, LimitsEntry, Measured, ALL};
use crate::compare::report::Report;
use crate::compare::Path;

pub use crate::compare::checks::calibration::Rules;

/// The entry key of a path: `cpu`, `gpu`, or `hybrid` for every split and
/// expert-cache path.
fn entry_key(path: Path) -> String {
    match path {
        Path::Hybrid(_) | Path::Cached { .. } => "hybrid".into(),
        p => p.to_string(),
    }
}

/// Draws up the limits of every model in `report` (its first path's
/// entry, each other path's and each against the first). Errors: a
/// measurement that is not finite (a broken path cannot be calibrated).
pub fn draft(report: &Report, rules: &Rules) -> Result<String, String> {
    let mut out = String::new();
    for m in &report.models {
        // Entries in the order of the paths, each path's against the
        // first after them; a prompt joins its path's entry when it holds
        // the result of a check that has limits.
        let mut entries: BTreeMap<(usize, String), Vec<Measured>> = BTreeMap::new();
        for p in &m.prompts {
            let order = m.paths.iter().position(|x| *x == p.path).unwrap_or(0);
            let limited = |r: &CheckResult| {
                ALL.iter()
                    .any(|e| e.key == r.key() && !e.limit_keys.is_empty())
            };
            if p.checks.iter().any(limited) {
                entries
                    .entry((order, entry_key(p.path)))
                    .or_default()
                    .push(Measured {
                        prompt: &p.prompt,
                        path: p.path,
                        checks: Cow::Borrowed(&p.checks),
                    });
            }
            for r in p.checks.iter() {
                if let (Some(against), Some(results)) = (r.against(), r.calibrated_as()) {
                    entries
                        .entry((
                            order + m.paths.len(),
                            format!("{}-vs-{}", entry_key(p.path), entry_key(against)),
                        ))
                        .or_default()
                        .push(Measured {
                            prompt: &p.prompt,
                            path: p.path,
                            checks: Cow::Owned(results.0),
                        });
                }
            }
        }
        // Every split of a key in one entry, where its first was.
        let mut grouped: Vec<(String, Vec<Measured>)> = Vec::new();
        for ((_, key), items) in entries {
            match grouped.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.extend(items),
                None => grouped.push((key, items)),
            }
        }
        for (key, items) in grouped {
            let entry = LimitsEntry {
                model: &m.id,
                key: &key,
                rules,
                items,
            };
            write_entry(&mut out, &entry)?;
        }
    }
    Ok(out)
}

/// `[model.key]` and every check's limits in it, in the order of [`KEYS`].
fn write_entry(out: &mut String, entry: &LimitsEntry) -> Result<(), String> {
    let mut drafted = Vec::new();
    for e in ALL {
        drafted.extend((e.calibrate)(entry)?);
    }
    let place = |key: &str| {
        KEYS.iter()
            .position(|k| *k == key)
            .unwrap_or_else(|| panic!("{key}: not a key of the limits (thresholds::KEYS)"))
    };
    drafted.sort_by_key(|d| place(d.key));
    out.push_str(&format!("[{}]\n", entry.table()));
    for d in drafted {
        out.push_str(&d.text);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::checks::calibration::ceil125;
    use crate::compare::checks::corpus::CorpusResult;
    use crate::compare::checks::logits::LogitsResult;
    use crate::compare::checks::taps::{TapsResult, EXACT_LAYER0};
    use crate::compare::report::PromptReport;
    use crate::compare::sample;
    use crate::compare::Thresholds;

    /// The drafted limits parse, hold every measurement they were drawn
    /// from, and follow the layer-0 rules.
    #[test]
    fn drafted_limits_parse_and_hold_what_they_were_drawn_from() {
        let report = sample::report();
        let text = draft(&report, &Rules::default()).unwrap();
        let t = Thresholds::parse(&text, "draft").unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut checked = 0;
        for m in &report.models {
            for p in &m.prompts {
                let Some(l) = p.checks.get::<LogitsResult>() else {
                    continue;
                };
                let lim = t.limits(&m.id, p.path).unwrap_or_else(|| panic!("{text}"));
                assert!(l.nmse <= lim.logits_nmse, "{text}");
                assert!(l.kld.mean <= lim.kld_mean && l.kld.max <= lim.kld_max);
                assert!(l.top1_rate() >= lim.top1_min);
                for row in p
                    .checks
                    .get::<TapsResult>()
                    .into_iter()
                    .flat_map(|t| &t.rows)
                {
                    let before = row.layer.is_none() && row.name == "inp_scaled";
                    assert!(
                        row.nmse <= lim.tap_nmse(&row.name, row.layer, before),
                        "{} {:?}: {text}",
                        row.name,
                        row.layer
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 0, "the sample has taps");
    }

    #[test]
    fn cpu_layer0_follows_the_rule_unless_measured_above_it() {
        let mut report = sample::report();
        let text = draft(&report, &Rules::default()).unwrap();
        let t = Thresholds::parse(&text, "d").unwrap();
        let cpu = report.models[0]
            .prompts
            .iter()
            .find(|p| p.path == Path::Cpu && p.checks.get::<TapsResult>().is_some())
            .expect("the sample has cpu taps");
        for row in cpu
            .checks
            .get::<TapsResult>()
            .unwrap()
            .rows
            .iter()
            .filter(|r| r.layer == Some(0))
        {
            let lim = t.limits(&cpu.model, Path::Cpu).unwrap();
            let rule = if EXACT_LAYER0.contains(&row.name.as_str()) {
                1e-10
            } else {
                1e-3
            };
            let want = if row.nmse * 4.0 <= rule {
                rule
            } else {
                ceil125(row.nmse * 4.0)
            };
            let got = lim.tap_nmse(&row.name, Some(0), false);
            assert!(
                (got - want).abs() <= want * 1e-9,
                "{}: {got} != {want}",
                row.name
            );
        }
        // A non-finite measurement refuses to calibrate.
        for p in &mut report.models[0].prompts {
            if let Some(l) = p.checks.get_mut::<LogitsResult>() {
                l.nmse = f64::NAN;
            }
        }
        let e = draft(&report, &Rules::default()).unwrap_err();
        assert!(
            e.contains("logits_nmse") && e.contains("cannot be calibrated"),
            "{e}"
        );
    }

    #[test]
    fn corpus_limits_are_a_table_of_the_path_and_hold_the_measurement() {
        let mut report = sample::report();
        let m = &mut report.models[0];
        let corpus = CorpusResult {
            id: "corpus:t".into(),
            text: "/t".into(),
            source: "test".into(),
            n_ctx: 512,
            chunks: 1,
            positions: 255,
            kld_mean: 3.2e-3,
            kld_p99: 1.4e-2,
            kld_max: 2e-2,
            top1: 0.9294,
            ppl: 16.4,
            ppl_base: 16.3,
            tokens_match: Some(true),
            limits: None,
        };
        let mut p = PromptReport::new(&m.id, "corpus:t", Path::Cpu, 512);
        p.checks.put(corpus.clone());
        m.prompts.push(p.clone());
        let text = draft(&report, &Rules::default()).unwrap();
        let t = Thresholds::parse(&text, "d").unwrap_or_else(|e| panic!("{e}\n{text}"));
        let lim = t.limits(&report.models[0].id, Path::Cpu).unwrap();
        let c = lim.corpus.as_ref().unwrap_or_else(|| panic!("{text}"));
        assert_eq!(c.kld_mean, 2e-2);
        assert_eq!(c.kld_p99, 0.1);
        assert!((c.top1_min - 0.87).abs() < 1e-9, "{text}");
        // A corpus on a path without prompts has no entry to join.
        let m = &mut report.models[0];
        m.prompts
            .retain(|q| q.checks.get::<CorpusResult>().is_some());
        let e = draft(&report, &Rules::default()).unwrap_err();
        assert!(e.contains("without a prompt"), "{e}");
    }

    /// Each check writes only limits it names ([`Check::LIMIT_KEYS`]),
    /// each a key of [`KEYS`].
    ///
    /// [`Check::LIMIT_KEYS`]: crate::compare::checks::Check::LIMIT_KEYS
    #[test]
    fn each_check_drafts_its_own_keys() {
        let report = sample::report();
        let rules = Rules::default();
        let m = &report.models[0];
        let entry = LimitsEntry {
            model: &m.id,
            key: "cpu",
            rules: &rules,
            items: m
                .prompts
                .iter()
                .map(|p| Measured {
                    prompt: &p.prompt,
                    path: p.path,
                    checks: Cow::Borrowed(&p.checks),
                })
                .collect(),
        };
        let mut drafted = 0;
        for e in ALL {
            for d in (e.calibrate)(&entry).unwrap() {
                assert!(KEYS.contains(&d.key), "{}: {}", e.key, d.key);
                assert!(
                    e.limit_keys
                        .iter()
                        .any(|k| k.split('.').next() == Some(d.key)),
                    "{} drafts {}, not among its LIMIT_KEYS",
                    e.key,
                    d.key
                );
                drafted += 1;
            }
        }
        assert!(drafted >= 6, "{drafted}");
    }
}
