//! Logits: the last prompt position's whole vector, and at every prompt
//! position the next-token distribution against the captured top-64.

use serde::{Deserialize, Serialize};

use super::thresholds::Limits;
use super::{Check, Level};
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

impl Check for LogitsResult {
    const KEY: &'static str = "logits";
    const LEVEL: Level = Level::Prompt;
    const MEASURES: &'static str =
        "NMSE of the last position's logits; KL divergence and top-1 agreement at every prompt position";
    const LIMIT_KEYS: &'static [&'static str] =
        &["logits_nmse", "kld_mean", "kld_max", "top1_min", "near_tie"];
    const CALIBRATION: &'static str =
        "each the worst over the run's prompts times the headroom (top1_min: the lowest, divided)";
    const BASELINE: &'static str =
        "logits_nmse: 2x; kld_mean: +10%; kld_max: +25%; top1: fewer positions agree";
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
}
