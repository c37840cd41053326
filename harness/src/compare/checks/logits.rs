//! Logits: the last prompt position's whole vector, and at every prompt
//! position the next-token distribution against the captured top-64.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::calibration::{
    limit_text, measured_text, with_headroom, worst_of, Drafted, KLD_FLOOR, NMSE_FLOOR,
};
use super::greedy::GreedyResult;
use super::thresholds::Limits;
use super::tolerance::{top1_worse, Figure, Found, Reads, Rule, Tolerance, KLD_MEAN, TOP1};
use super::{Check, Level, LimitsEntry};
use crate::compare::{sci, within, Failure};
use crate::metrics::{self, Summary, TopK};
use crate::reference::TopKRow;

/// What one prompt position gives.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PositionStat {
    /// KL(llama.cpp ‖ ours) over llama.cpp's top-64 and a tail bucket
    /// ([`metrics::kld_top_k`]).
    #[serde(deserialize_with = "crate::nan::f64")]
    pub kld: f64,
    /// Whether our most likely token is llama.cpp's.
    pub top1: bool,
    /// llama.cpp's top-1 minus top-2 logit: how close to a tie it was.
    pub margin: f32,
    /// Where we disagree: llama.cpp's logit of its token minus its logit
    /// of ours (None: we agree, or ours is not in its top-64).
    pub margin_to_ours: Option<f32>,
    /// Our logits of llama.cpp's top-64 ids are its values, bit for bit.
    #[serde(default)]
    pub identical: bool,
}

impl PositionStat {
    /// A disagreement that is not a near-tie: llama.cpp preferred its
    /// token to ours by `near_tie` or more (or ours is not in its top-64).
    pub fn hard_disagreement(&self, near_tie: f64) -> bool {
        !self.top1 && !self.margin_to_ours.is_some_and(|m| (m as f64) < near_tie)
    }
}

/// Compares our logits `ours` (every logit of one position) with the
/// capture's row for that position.
pub fn position(reference: TopKRow<'_>, ours: &[f32]) -> PositionStat {
    let top = TopK {
        ids: reference.ids,
        logits: reference.values,
        lse: reference.lse,
    };
    let top1 = metrics::top1_agrees(reference.ids[0], ours);
    let margin_to_ours = match metrics::argmax(ours) {
        Some(o) if !top1 => reference
            .ids
            .iter()
            .position(|&id| id as i64 == o as i64)
            .map(|i| reference.values[0] - reference.values[i]),
        _ => None,
    };
    PositionStat {
        kld: metrics::kld_top_k(top, ours),
        top1,
        margin: match reference.values {
            [a, b, ..] => a - b,
            _ => f32::INFINITY,
        },
        margin_to_ours,
        identical: reference.ids.iter().zip(reference.values).all(|(&id, v)| {
            ours.get(id as usize)
                .is_some_and(|o| o.to_bits() == v.to_bits())
        }),
    }
}

/// The logits of one prompt: its last position and all its positions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogitsResult {
    /// Last prompt position, whole vocabulary.
    #[serde(deserialize_with = "crate::nan::f64")]
    pub nmse: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub max_abs: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub cosine: f64,
    /// Most likely token at the last position: ours and llama.cpp's.
    pub argmax_ours: Option<usize>,
    pub argmax_reference: Option<usize>,
    /// KLD over every prompt position.
    pub kld: Summary,
    /// Positions whose most likely token is llama.cpp's, and how many.
    pub top1_agree: usize,
    pub positions: usize,
    /// Of the positions that disagree, those that are near-ties (llama.cpp
    /// preferred its token to ours by less than the near-tie epsilon) and
    /// those that are not (failures).
    pub top1_near_ties: usize,
    pub top1_hard: usize,
    /// Per position, in order.
    pub per_position: Vec<PositionStat>,
}

impl LogitsResult {
    /// Fraction of positions whose most likely token agrees.
    pub fn top1_rate(&self) -> f64 {
        if self.positions == 0 {
            1.0
        } else {
            self.top1_agree as f64 / self.positions as f64
        }
    }
}

/// Summarises a prompt: `last_reference` / `last_ours` are the last
/// position's whole logits vectors, `per_position` every position's stats.
pub fn summarize(
    last_reference: &[f32],
    last_ours: &[f32],
    per_position: Vec<PositionStat>,
    near_tie: f64,
) -> LogitsResult {
    let klds: Vec<f64> = per_position.iter().map(|p| p.kld).collect();
    LogitsResult {
        nmse: metrics::nmse(last_reference, last_ours),
        max_abs: metrics::max_abs_diff(last_reference, last_ours),
        cosine: metrics::cosine(last_reference, last_ours),
        argmax_ours: metrics::argmax(last_ours),
        argmax_reference: metrics::argmax(last_reference),
        kld: metrics::summarize(&klds),
        top1_agree: per_position.iter().filter(|p| p.top1).count(),
        positions: per_position.len(),
        top1_near_ties: per_position
            .iter()
            .filter(|p| !p.top1 && !p.hard_disagreement(near_tie))
            .count(),
        top1_hard: per_position
            .iter()
            .filter(|p| p.hard_disagreement(near_tie))
            .count(),
        per_position,
    }
}

/// The least `near_tie` `harness calibrate` proposes.
pub const NEAR_TIE: f64 = 1.5;

/// Last-position logits NMSE: 2x, floor 1e-12.
pub const LOGITS_NMSE: Figure = Figure {
    name: "logits_nmse",
    reads: Reads::Sci,
    rule: Rule::Grows(Tolerance {
        factor: 2.0,
        floor: 1e-12,
    }),
};
/// KLD max over a prompt's positions: +25%, floor 1e-6 nats.
pub const KLD_MAX: Figure = Figure {
    name: "kld_max",
    reads: Reads::Sci,
    rule: Rule::Grows(Tolerance {
        factor: 1.25,
        floor: 1e-6,
    }),
};
impl Check for LogitsResult {
    const KEY: &'static str = "logits";
    const LEVEL: Level = Level::Prompt;
    const MEASURES: &'static str =
        "NMSE of the last position's logits; KL divergence and top-1 agreement at every prompt position";
    const LIMIT_KEYS: &'static [&'static str] =
        &["logits_nmse", "kld_mean", "kld_max", "top1_min", "near_tie"];
    const FAILURES: &'static [&'static str] = &["logits_nmse", "kld_mean", "kld_max", "top1"];
    const NULL_WHEN_ABSENT: bool = true;

    /// Under "logits_nmse", "logits" (the exact profile), "kld_mean",
    /// "kld_max" and "top1".
    fn failures(&self, limits: &Limits) -> Vec<Failure> {
        let l = self;
        let mut out = Vec::new();
        if !within(l.nmse, limits.logits_nmse) {
            out.push(Failure::new(
                "logits_nmse",
                format!(
                    "last-position logits NMSE {:.3e} > {:.1e}",
                    l.nmse, limits.logits_nmse
                ),
            ));
        }
        if limits.exact {
            if let Some(pos) = l.per_position.iter().position(|p| !p.identical) {
                let n = l.per_position.iter().filter(|p| !p.identical).count();
                out.push(Failure::new(
                    "logits",
                    format!(
                        "{n} of {} positions' top-64 logits differ from llama.cpp's (exact profile); first: position {pos}",
                        l.positions
                    ),
                ));
            }
        }
        if !within(l.kld.mean, limits.kld_mean) {
            out.push(Failure::new(
                "kld_mean",
                format!("mean KLD {:.3e} > {:.1e}", l.kld.mean, limits.kld_mean),
            ));
        }
        if !within(l.kld.max, limits.kld_max) {
            let worst = l.per_position.iter().position(|p| p.kld == l.kld.max);
            out.push(Failure::new(
                "kld_max",
                format!(
                    "max KLD {:.3e} > {:.1e} (position {})",
                    l.kld.max,
                    limits.kld_max,
                    worst.map_or("?".into(), |p| p.to_string())
                ),
            ));
        }
        if l.top1_rate() < limits.top1_min {
            out.push(Failure::new(
                "top1",
                format!(
                    "top-1 agreement {}/{} ({:.1}%) < {:.1}%",
                    l.top1_agree,
                    l.positions,
                    100.0 * l.top1_rate(),
                    100.0 * limits.top1_min
                ),
            ));
        }
        if let Some((pos, p)) = l
            .per_position
            .iter()
            .enumerate()
            .find(|(_, p)| p.hard_disagreement(limits.near_tie))
        {
            out.push(Failure::new(
                "top1",
                format!(
                    "{} position(s) where our most likely token is not llama.cpp's and not a near-tie; first: position {pos}, llama.cpp's margin to ours {} >= {}",
                    l.top1_hard,
                    p.margin_to_ours
                        .map_or("(not in its top-64)".to_string(), |m| format!("{m:.3}")),
                    limits.near_tie
                ),
            ));
        }
        out
    }

    /// `logits_nmse`, `kld_mean`, `kld_max`: the worst over the entry's
    /// prompts times the headroom; `top1_min` a gross-failure guard, the
    /// lowest agreement less 0.15 in steps of 0.05 (the per-position check
    /// is `near_tie`); `near_tie` [`NEAR_TIE`] (quantization noise moves
    /// logits by 0.3-0.5 RMS; the largest disagreement seen was 0.68), or
    /// twice the largest margin at a disagreement (at a prompt position or
    /// a greedy step) if that is more.
    fn calibrate(entry: &LimitsEntry) -> Result<Vec<Drafted>, String> {
        let ms: Vec<(&LogitsResult, String)> = entry
            .results::<LogitsResult>()
            .map(|(l, m)| (l, m.at()))
            .collect();
        if ms.is_empty() {
            return Ok(Vec::new());
        }
        let h = entry.rules.headroom;
        let mut out = Vec::new();
        type Of = fn(&LogitsResult) -> f64;
        let figures: [(&str, Of, f64); 3] = [
            ("logits_nmse", |l| l.nmse, NMSE_FLOOR),
            ("kld_mean", |l| l.kld.mean, KLD_FLOOR),
            ("kld_max", |l| l.kld.max, KLD_FLOOR),
        ];
        for (name, f, floor) in figures {
            let w = worst_of(ms.iter().map(|(l, at)| (f(l), at.clone())), true)
                .expect("an entry has a measurement");
            entry.finite(name, &w)?;
            let mut text = String::new();
            if name == "logits_nmse" {
                let _ = writeln!(text, "# {} prompts measured", ms.len());
            }
            let _ = writeln!(
                text,
                "{name} = {}  # measured {} ({}), x{h}",
                limit_text(with_headroom(w.value, entry.rules, floor)),
                measured_text(w.value),
                w.at
            );
            out.push(Drafted { key: name, text });
        }
        let w = worst_of(ms.iter().map(|(l, at)| (l.top1_rate(), at.clone())), false)
            .expect("an entry has a measurement");
        let top1 = (((w.value - 0.15) / 0.05).floor() * 0.05).clamp(0.0, 1.0);
        out.push(Drafted {
            key: "top1_min",
            text: format!(
                "top1_min = {top1:.2}  # measured {:.3} ({}), less 0.15\n",
                w.value, w.at
            ),
        });
        let margins = entry.results::<LogitsResult>().flat_map(|(l, m)| {
            let greedy = m
                .get::<GreedyResult>()
                .and_then(|g| g.mismatch.as_ref())
                .and_then(|x| x.reference_margin_to_ours);
            l.per_position
                .iter()
                .filter(|p| !p.top1)
                .filter_map(|p| p.margin_to_ours)
                .map(|x| (f64::from(x), m.at()))
                .chain(greedy.map(|x| (f64::from(x), format!("{} greedy", m.at()))))
        });
        let text = match worst_of(margins, true) {
            Some(w) => {
                let tie = NEAR_TIE.max((w.value * 20.0).ceil() / 10.0);
                format!(
                    "near_tie = {tie}  # largest margin at a disagreement {:.3} ({})\n",
                    w.value, w.at
                )
            }
            None => format!("near_tie = {NEAR_TIE}  # no disagreement measured\n"),
        };
        out.push(Drafted {
            key: "near_tie",
            text,
        });
        Ok(out)
    }

    const FIGURES: &'static [Figure] = &[LOGITS_NMSE, KLD_MEAN, KLD_MAX, TOP1];

    /// Logits NMSE, KLD mean and max, top-1 agreement.
    fn regressions(&self, baseline: &LogitsResult) -> Vec<Found> {
        let (b, n) = (baseline, self);
        let mut out: Vec<Found> = [
            Found::grown(LOGITS_NMSE, "last-position logits NMSE", b.nmse, n.nmse),
            Found::grown(KLD_MEAN, "KLD mean", b.kld.mean, n.kld.mean),
            Found::grown(KLD_MAX, "KLD max", b.kld.max, n.kld.max),
        ]
        .into_iter()
        .flatten()
        .collect();
        if top1_worse((b.top1_agree, b.positions), (n.top1_agree, n.positions)) {
            out.push(Found {
                figure: TOP1,
                baseline: b.top1_rate(),
                now: n.top1_rate(),
                detail: format!(
                    "top-1 agreement {}/{} against {}/{} in the baseline",
                    n.top1_agree, n.positions, b.top1_agree, b.positions
                ),
            });
        }
        out
    }

    fn summary(&self) -> String {
        format!(
            "NMSE {}, KLD mean {}, max {}, top-1 {}/{}",
            sci(self.nmse),
            sci(self.kld.mean),
            sci(self.kld.max),
            self.top1_agree,
            self.positions
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_against_its_top_k() {
        let reference = [2.0f32, 1.0, 0.0, -1.0];
        let (ids, values, lse) = crate::reference::arrays::top_k_lse(&reference, 2);
        let row = TopKRow {
            ids: &ids,
            values: &values,
            lse,
        };
        let same = position(row, &reference);
        assert!(same.top1 && same.kld.abs() < 1e-7 && same.margin == 1.0);
        let other = position(row, &[1.0, 2.0, 0.0, -1.0]);
        assert!(!other.top1 && other.kld > 0.1);
        let r = summarize(&reference, &reference, vec![same, other], 1.5);
        assert_eq!((r.top1_agree, r.positions, r.top1_near_ties), (1, 2, 1));
        assert_eq!((r.nmse, r.argmax_ours, r.top1_rate()), (0.0, Some(0), 0.5));
        assert_eq!(
            summarize(&reference, &reference, vec![other], 0.5).top1_near_ties,
            0
        );
    }

    #[test]
    fn figures_worse_beyond_their_tolerances() {
        use crate::compare::sample;
        let tol = |f: Figure| match f.rule {
            Rule::Grows(t) => t,
            _ => panic!("{}", f.name),
        };
        assert!(!tol(KLD_MAX).worse(1e-2, 1.24e-2));
        assert!(tol(KLD_MAX).worse(1e-2, 1.26e-2));
        assert!(!tol(LOGITS_NMSE).worse(1e-2, 1e-5));
        assert!(tol(LOGITS_NMSE).worse(1e-3, f64::NAN));
        assert_eq!(KLD_MEAN.rule(), "+10% (floor 1e-6)");
        let base = sample::report().models[0].prompts[0]
            .checks
            .get::<LogitsResult>()
            .unwrap()
            .clone();
        assert!(base.top1_agree > 0);
        assert!(base.regressions(&base).is_empty());
        let mut worse = base.clone();
        worse.nmse = base.nmse.max(1e-12) * 3.0;
        worse.top1_agree -= 1;
        let found: Vec<&str> = worse
            .regressions(&base)
            .iter()
            .map(|f| f.figure.name)
            .collect();
        assert_eq!(found, ["logits_nmse", "top1"]);
    }
}
