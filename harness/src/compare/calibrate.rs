//! `harness calibrate`: limits for a model from what its paths measure.
//! Every figure of a limits entry is the worst over the run's prompts
//! times a headroom factor (default 4), rounded up to 1, 2 or 5 times a
//! power of ten, with the measurement, where it was taken and the factor
//! in a comment; the file parses as a `--thresholds` file.
//!
//! The rules ci/thresholds.toml argues (its header comment):
//! - on the `cpu` path, layer 0's taps that no re-quantized differing value
//!   reaches (the embedding, the attention norm, Q/K/V, QK-norms, RoPE, the
//!   attention output: [`EXACT_LAYER0`]) are held to 1e-10, the rest of
//!   layer 0 to 1e-3. sharpi's CPU kernels quantize activations as
//!   llama.cpp's do, so there only f32 summation order differs (measured
//!   <= 2e-13). A measurement above such a rule is not hidden: the limit is
//!   then measured x headroom and the comment says so;
//! - other paths and path pairs get measured x headroom in layer 0 too,
//!   with a floor of 1e-12 for figures measured 0;
//! - `top1_min` is a gross-failure guard: the lowest agreement measured
//!   less 0.15, in steps of 0.05 (the per-position check is `near_tie`);
//! - the corpus (`[model.path.corpus]`, where a corpus base exists): KLD
//!   mean and p99 at the worst times the headroom; `top1_min` the lowest
//!   agreement less 0.05 ([`CORPUS_TOP1_MARGIN`]);
//! - `near_tie`: 1.5 (ci/thresholds.toml: quantization noise moves logits
//!   by 0.3-0.5 RMS; the largest disagreement seen was 0.68), or twice the
//!   largest margin at a disagreement if that is more;
//! - `routing_tie` (a mixture of experts): the widest near-tie at which a
//!   path chose other experts than the reference (measured without a
//!   bound, as every limit here), times the headroom; 0 when none did.
//!
//! Every `hybrid:N` and expert-cache path is one `hybrid` entry (and
//! `hybrid-vs-FIRST`), the worst over its splits, as the limits' lookup
//! falls back to `hybrid` for any of them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::compare::checks::corpus::CorpusResult;
use crate::compare::checks::cross::CrossResult;
use crate::compare::checks::greedy::GreedyResult;
use crate::compare::checks::logits::LogitsResult;
use crate::compare::checks::routing::ROUTING_TIE;
use crate::compare::checks::taps::TapsResult;
use crate::compare::report::{PromptReport, Report};
use crate::compare::Path;

/// Layer-0 taps held to `exact_layer0` on the cpu path.
pub const EXACT_LAYER0: &[&str] = &[
    "inp_scaled",
    "attn_norm",
    "Qcur",
    "Kcur",
    "Vcur",
    "Qcur_normed",
    "Kcur_normed",
    "kqv_out",
];

/// How measurements become limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rules {
    pub headroom: f64,
    /// The cpu path's [`EXACT_LAYER0`] taps.
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
const NMSE_FLOOR: f64 = 1e-12;
/// Least limit of a KL divergence.
const KLD_FLOOR: f64 = 1e-9;
const NEAR_TIE: f64 = 1.5;
/// What the corpus's `top1_min` leaves below the lowest agreement
/// measured: 0.05 is 13 of 255 positions (one chunk of 512), about three
/// times the binomial spread of a 95 % agreement there.
pub const CORPUS_TOP1_MARGIN: f64 = 0.05;

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

/// A figure at its worst, and where.
#[derive(Clone, Debug)]
struct Worst {
    value: f64,
    at: String,
}

fn worst_of(items: impl Iterator<Item = (f64, String)>, higher_is_worse: bool) -> Option<Worst> {
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

/// One measured result of a limits entry: where, its logits and taps.
struct Measured<'a> {
    at: String,
    logits: &'a LogitsResult,
    taps: Option<&'a TapsResult>,
    greedy_margin: Option<f32>,
}

/// The entry key of a path: `cpu`, `gpu`, or `hybrid` for every split and
/// expert-cache path.
fn entry_key(path: Path) -> String {
    match path {
        Path::Hybrid(_) | Path::Cached { .. } => "hybrid".into(),
        p => p.to_string(),
    }
}

/// A TOML key: bare when it can be.
fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        k.to_string()
    } else {
        format!("{k:?}")
    }
}

fn sci(x: f64) -> String {
    format!("{x:.2e}")
}

fn limit_text(x: f64) -> String {
    format!("{x:.0e}")
}

/// Draws up the limits of every model in `report` (its first path's
/// entry, each other path's and each against the first). Errors: a
/// measurement that is not finite (a broken path cannot be calibrated).
pub fn draft(report: &Report, rules: &Rules) -> Result<String, String> {
    let mut out = String::new();
    for m in &report.models {
        let mut entries: BTreeMap<(usize, String), Vec<Measured>> = BTreeMap::new();
        for p in &m.prompts {
            let at = |p: &PromptReport| match p.path {
                Path::Cpu | Path::Gpu => p.prompt.clone(),
                path => format!("{} {path}", p.prompt),
            };
            let order = m.paths.iter().position(|x| *x == p.path).unwrap_or(0);
            let greedy_margin = p
                .checks
                .get::<GreedyResult>()
                .and_then(|g| g.mismatch.as_ref())
                .and_then(|x| x.reference_margin_to_ours);
            if let Some(l) = p.checks.get::<LogitsResult>() {
                entries
                    .entry((order, entry_key(p.path)))
                    .or_default()
                    .push(Measured {
                        at: at(p),
                        logits: l,
                        taps: p.checks.get::<TapsResult>(),
                        greedy_margin,
                    });
            }
            if let Some(v) = p.checks.get::<CrossResult>() {
                entries
                    .entry((
                        order + m.paths.len(),
                        format!("{}-vs-{}", entry_key(p.path), entry_key(v.against)),
                    ))
                    .or_default()
                    .push(Measured {
                        at: at(p),
                        logits: &v.logits,
                        taps: v.taps.as_ref(),
                        greedy_margin: None,
                    });
            }
        }
        let mut corpus: BTreeMap<String, Vec<(&CorpusResult, String)>> = BTreeMap::new();
        for p in &m.prompts {
            if let Some(c) = p.checks.get::<CorpusResult>() {
                corpus
                    .entry(entry_key(p.path))
                    .or_default()
                    .push((c, format!("{} {}", c.id, p.path)));
            }
        }
        let mut done = std::collections::BTreeSet::new();
        for ((_, key), ms) in &entries {
            if done.insert(key.clone()) {
                let same: Vec<&Measured> = entries
                    .iter()
                    .filter(|((_, k), _)| k == key)
                    .flat_map(|(_, v)| v)
                    .collect();
                entry(&mut out, &m.id, key, &same, rules)?;
                if let Some(cs) = corpus.remove(key) {
                    corpus_entry(&mut out, &m.id, key, &cs, rules)?;
                }
            }
            let _ = ms;
        }
        if let Some(key) = corpus.keys().next() {
            return Err(format!(
                "{} {key}: the corpus was measured without a prompt on that path; \
                 calibrate it together with the prompts (its limits are a table of the path's entry)",
                m.id
            ));
        }
    }
    Ok(out)
}

/// The `[model.key.corpus]` table: KLD mean and p99 at the worst measured
/// times the headroom; `top1_min` the lowest agreement less
/// [`CORPUS_TOP1_MARGIN`], down to a multiple of 0.01.
fn corpus_entry(
    out: &mut String,
    model: &str,
    key: &str,
    cs: &[(&CorpusResult, String)],
    rules: &Rules,
) -> Result<(), String> {
    let h = rules.headroom;
    let _ = writeln!(out, "[{}.{}.corpus]", toml_key(model), toml_key(key));
    type Figure = fn(&CorpusResult) -> f64;
    let figures: [(&str, Figure); 2] = [("kld_mean", |c| c.kld_mean), ("kld_p99", |c| c.kld_p99)];
    for (name, f) in figures {
        let w = worst_of(cs.iter().map(|(c, at)| (f(c), at.clone())), true)
            .expect("a corpus entry has a measurement");
        if !w.value.is_finite() {
            return Err(format!(
                "{model} {key}: corpus {name} measured {} ({}): a path that gives this cannot be calibrated",
                w.value, w.at
            ));
        }
        let lim = ceil125(w.value * h).max(KLD_FLOOR);
        let _ = writeln!(
            out,
            "{name} = {}  # measured {} ({}), x{h}",
            limit_text(lim),
            sci(w.value),
            w.at
        );
    }
    let w = worst_of(cs.iter().map(|(c, at)| (c.top1, at.clone())), false)
        .expect("a corpus entry has a measurement");
    let top1 = (((w.value - CORPUS_TOP1_MARGIN) * 100.0).floor() / 100.0).clamp(0.0, 1.0);
    let _ = writeln!(
        out,
        "top1_min = {top1:.2}  # measured {:.4} ({}), less {CORPUS_TOP1_MARGIN}\n",
        w.value, w.at
    );
    Ok(())
}

fn entry(
    out: &mut String,
    model: &str,
    key: &str,
    ms: &[&Measured],
    rules: &Rules,
) -> Result<(), String> {
    let h = rules.headroom;
    let sect = format!("{}.{}", toml_key(model), toml_key(key));
    let finite = |what: &str, w: &Worst| -> Result<(), String> {
        if w.value.is_finite() {
            Ok(())
        } else {
            Err(format!(
                "{model} {key}: {what} measured {} ({}): a path that gives this cannot be calibrated",
                w.value, w.at
            ))
        }
    };
    let _ = writeln!(out, "[{sect}]");
    let _ = writeln!(out, "# {} prompts measured", ms.len());
    type Figure = fn(&LogitsResult) -> f64;
    let figures: [(&str, Figure, f64); 3] = [
        ("logits_nmse", |l| l.nmse, NMSE_FLOOR),
        ("kld_mean", |l| l.kld.mean, KLD_FLOOR),
        ("kld_max", |l| l.kld.max, KLD_FLOOR),
    ];
    for (name, f, floor) in figures {
        let w = worst_of(ms.iter().map(|m| (f(m.logits), m.at.clone())), true)
            .expect("an entry has a measurement");
        finite(name, &w)?;
        let lim = ceil125(w.value * h).max(floor);
        let _ = writeln!(
            out,
            "{name} = {}  # measured {} ({}), x{h}",
            limit_text(lim),
            sci(w.value),
            w.at
        );
    }
    let w = worst_of(
        ms.iter().map(|m| (m.logits.top1_rate(), m.at.clone())),
        false,
    )
    .expect("an entry has a measurement");
    let top1 = (((w.value - 0.15) / 0.05).floor() * 0.05).clamp(0.0, 1.0);
    let _ = writeln!(
        out,
        "top1_min = {top1:.2}  # measured {:.3} ({}), less 0.15",
        w.value, w.at
    );
    let margins = ms.iter().flat_map(|m| {
        m.logits
            .per_position
            .iter()
            .filter(|p| !p.top1)
            .filter_map(|p| p.margin_to_ours)
            .map(|x| (f64::from(x), m.at.clone()))
            .chain(
                m.greedy_margin
                    .map(|x| (f64::from(x), format!("{} greedy", m.at))),
            )
    });
    match worst_of(margins, true) {
        Some(w) => {
            let tie = NEAR_TIE.max((w.value * 20.0).ceil() / 10.0);
            let _ = writeln!(
                out,
                "near_tie = {tie}  # largest margin at a disagreement {:.3} ({})",
                w.value, w.at
            );
        }
        None => {
            let _ = writeln!(out, "near_tie = {NEAR_TIE}  # no disagreement measured");
        }
    }
    // A mixture of experts: the widest near-tie that chose other experts.
    let routed = ms
        .iter()
        .filter_map(|m| m.taps)
        .any(|t| t.rows.iter().any(|r| r.name == "ffn_moe_topk"));
    if routed {
        let gaps = ms
            .iter()
            .filter_map(|m| Some((m.taps?.routing_set_gap?, m.at.clone())));
        match worst_of(gaps, true) {
            Some(w) => {
                let _ = writeln!(
                    out,
                    "routing_tie = {}  # widest near-tie that chose other experts {} ({}), x{h}",
                    limit_text(ceil125(w.value * h)),
                    sci(w.value),
                    w.at
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "routing_tie = 0  # no near-tie chose other experts: {ROUTING_TIE:.0e} of the larger alone"
                );
            }
        }
    }

    // Taps: per name, layer 0 (and the whole-model taps before the first
    // layer) apart from the rest.
    let mut taps: BTreeMap<&str, Worst> = BTreeMap::new();
    let mut first: BTreeMap<&str, Worst> = BTreeMap::new();
    for m in ms {
        let Some(t) = m.taps else { continue };
        let mut seen_layer = false;
        for row in &t.rows {
            seen_layer |= row.layer.is_some();
            let layer0 = row.layer == Some(0) || (row.layer.is_none() && !seen_layer);
            let table = if layer0 { &mut first } else { &mut taps };
            let at = match row.layer {
                Some(l) => format!("{}, layer {l}", m.at),
                None => m.at.clone(),
            };
            let w = Worst {
                value: row.nmse,
                at,
            };
            if !w.value.is_finite() {
                finite(&format!("tap {}", row.name), &w)?;
            }
            match table.get(row.name.as_str()) {
                Some(old) if old.value >= w.value => {}
                _ => {
                    table.insert(row.name.as_str(), w);
                }
            }
        }
    }
    if taps.is_empty() && first.is_empty() {
        let _ = writeln!(
            out,
            "taps = {{ default = 1e-2 }}  # no taps measured: a placeholder bound for taps of later captures\n"
        );
        return Ok(());
    }
    let limit = |w: &Worst| ceil125(w.value * h).max(NMSE_FLOOR);
    let _ = writeln!(out, "\n[{sect}.taps]");
    let default = taps.values().map(limit).fold(NMSE_FLOOR, f64::max);
    let _ = writeln!(
        out,
        "default = {}  # the loosest below: a tap not measured here",
        limit_text(default)
    );
    for (name, w) in &taps {
        let _ = writeln!(
            out,
            "{} = {}  # measured {} ({}), x{h}",
            toml_key(name),
            limit_text(limit(w)),
            sci(w.value),
            w.at
        );
    }
    if !first.is_empty() {
        let _ = writeln!(out, "\n[{sect}.taps_layer0]");
        let cpu = key == "cpu";
        let layer0 = |name: &str, w: &Worst| -> (f64, String) {
            let rule = if EXACT_LAYER0.contains(&name) {
                rules.exact_layer0
            } else {
                rules.rest_layer0
            };
            if cpu && w.value * h <= rule {
                (rule, format!("measured {} ({}), rule", sci(w.value), w.at))
            } else if cpu {
                (
                    limit(w),
                    format!(
                        "measured {} ({}) is above the rule {} / x{h}: measured x{h}",
                        sci(w.value),
                        w.at,
                        limit_text(rule)
                    ),
                )
            } else {
                (
                    limit(w),
                    format!("measured {} ({}), x{h}", sci(w.value), w.at),
                )
            }
        };
        let default = if cpu {
            rules.rest_layer0
        } else {
            first.values().map(limit).fold(NMSE_FLOOR, f64::max)
        };
        let _ = writeln!(out, "default = {}", limit_text(default));
        for (name, w) in &first {
            let (lim, why) = layer0(name, w);
            let _ = writeln!(out, "{} = {}  # {why}", toml_key(name), limit_text(lim));
        }
    }
    out.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::sample;
    use crate::compare::Thresholds;

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
    }

    #[test]
    fn keys_are_quoted_where_toml_needs_it() {
        assert_eq!(toml_key("cpu"), "cpu");
        assert_eq!(toml_key("gpu-vs-cpu"), "gpu-vs-cpu");
        assert_eq!(toml_key("smollm2.q8_0"), "\"smollm2.q8_0\"");
    }

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
}
