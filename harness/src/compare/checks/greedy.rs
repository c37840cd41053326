//! Our greedy continuation against llama.cpp's.
//!
//! We decode our own argmax token by token (lowest id on ties, as
//! llama.cpp) from the prompt's last logits and compare each token with
//! the captured one. The comparison stops at the first different token:
//! past it the two continue from different text. That token is a
//! **near-tie** when llama.cpp's own logits barely preferred its token to
//! ours: its logit of its token minus its logit of our token (the top-2
//! margin when ours was its runner-up) is under the `near_tie` limit. Our
//! token must be in llama.cpp's top-64 at that step to be a near-tie.

use serde::{Deserialize, Serialize};

use super::thresholds::Limits;
use super::tolerance::{Figure, Found, Reads, Rule};
use super::{Check, Level};
use crate::compare::Failure;
use crate::metrics;
use crate::reference::TopKRow;

/// How a continuation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every compared token agrees.
    Agree,
    /// The first different token is a near-tie.
    NearTie,
    /// The first different token is not a near-tie: a failure.
    Diverged,
}

/// Where our continuation left llama.cpp's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    pub step: usize,
    pub ours: u32,
    pub reference: u32,
    /// llama.cpp's top-1 minus top-2 logit at that step.
    pub reference_top2_margin: f32,
    /// llama.cpp's logit of its token minus its logit of ours (None: ours
    /// is not in its top-64).
    pub reference_margin_to_ours: Option<f32>,
    /// Our logit of our token minus our logit of llama.cpp's.
    pub our_margin: f32,
}

/// Judges one different token: near-tie or not.
pub fn judge(
    step: usize,
    reference: TopKRow<'_>,
    ours_token: u32,
    ours_logits: &[f32],
    near_tie: f64,
) -> (Outcome, Mismatch) {
    let ref_token = reference.ids[0] as u32;
    let top2 = match reference.values {
        [a, b, ..] => a - b,
        _ => f32::INFINITY,
    };
    let to_ours = reference
        .ids
        .iter()
        .position(|&id| id as i64 == ours_token as i64)
        .map(|i| reference.values[0] - reference.values[i]);
    let outcome = match to_ours {
        Some(m) if (m as f64) < near_tie => Outcome::NearTie,
        _ => Outcome::Diverged,
    };
    let m = Mismatch {
        step,
        ours: ours_token,
        reference: ref_token,
        reference_top2_margin: top2,
        reference_margin_to_ours: to_ours,
        our_margin: ours_logits[ours_token as usize] - ours_logits[ref_token as usize],
    };
    (outcome, m)
}

/// A greedy continuation compared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GreedyResult {
    /// Tokens llama.cpp produced (fewer than 32 when it ended).
    pub reference_len: usize,
    /// Steps compared (at most the limit asked for).
    pub compared: usize,
    /// Tokens that agree before the first difference.
    pub agree: usize,
    pub outcome: Outcome,
    pub mismatch: Option<Mismatch>,
    /// Our tokens, up to and including the first different one.
    pub ours: Vec<u32>,
}

/// Runs our greedy decode from `first_logits` (the last prompt position)
/// for up to `max_steps` of the captured tokens; `decode(token)` feeds our
/// token and returns the next logits. `step_row(i)` is the capture's row
/// of step `i`.
pub fn run<'r>(
    reference_tokens: &[i32],
    step_row: impl Fn(usize) -> TopKRow<'r>,
    first_logits: &[f32],
    max_steps: usize,
    near_tie: f64,
    mut decode: impl FnMut(u32) -> Result<Vec<f32>, String>,
) -> Result<GreedyResult, String> {
    let n = reference_tokens.len().min(max_steps);
    let mut out = GreedyResult {
        reference_len: reference_tokens.len(),
        compared: n,
        agree: 0,
        outcome: Outcome::Agree,
        mismatch: None,
        ours: Vec::new(),
    };
    let mut logits = first_logits.to_vec();
    for (i, &want) in reference_tokens.iter().enumerate().take(n) {
        let t = metrics::argmax(&logits).ok_or("logits without a number")? as u32;
        out.ours.push(t);
        if t as i64 != want as i64 {
            let (outcome, m) = judge(i, step_row(i), t, &logits, near_tie);
            out.outcome = outcome;
            out.mismatch = Some(m);
            break;
        }
        out.agree += 1;
        if i + 1 < n {
            logits = decode(t)?;
        }
    }
    Ok(out)
}

/// The greedy steps that agree: fewer is worse.
pub const GREEDY: Figure = Figure {
    name: "greedy",
    reads: Reads::Steps,
    rule: Rule::Words("fewer steps agree"),
};

impl Check for GreedyResult {
    const KEY: &'static str = "greedy";
    const LEVEL: Level = Level::Prompt;
    const MEASURES: &'static str =
        "our greedy continuation against llama.cpp's, near-ties told apart from failures";
    /// Shared with the logits, whose rule draws it from the margins at
    /// the disagreements of both ([`super::logits::NEAR_TIE`]).
    const LIMIT_KEYS: &'static [&'static str] = &["near_tie"];
    const NULL_WHEN_ABSENT: bool = true;
    const FIGURES: &'static [Figure] = &[GREEDY];

    /// Fewer agreeing steps, of the steps both runs compared.
    fn regressions(&self, baseline: &GreedyResult) -> Vec<Found> {
        let held_to = baseline.agree.min(self.compared);
        if self.agree >= held_to {
            return Vec::new();
        }
        vec![Found {
            figure: GREEDY,
            baseline: baseline.agree as f64,
            now: self.agree as f64,
            detail: format!(
                "greedy continuation agrees for {} step(s) against {} in the baseline",
                self.agree, baseline.agree
            ),
        }]
    }

    fn failures(&self, limits: &Limits) -> Vec<Failure> {
        if self.outcome != Outcome::Diverged {
            return Vec::new();
        }
        let m = self.mismatch.as_ref().expect("a divergence has a mismatch");
        vec![Failure::new(
            "greedy",
            format!(
                "step {}: ours {} llama.cpp {}, llama.cpp's margin to ours {} (top-2 {:.3}) >= near-tie {}",
                m.step,
                m.ours,
                m.reference,
                m.reference_margin_to_ours
                    .map_or("(not in its top-64)".to_string(), |x| format!("{x:.3}")),
                m.reference_top2_margin,
                limits.near_tie
            ),
        )]
    }

    fn summary(&self) -> String {
        let tag = match self.outcome {
            Outcome::Agree => "",
            Outcome::NearTie => " near-tie",
            Outcome::Diverged => " DIVERGED",
        };
        format!("{}/{}{tag}", self.agree, self.compared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::TopKTable;

    /// A toy model: the next token is `prev + 1` (mod 4) with a margin.
    fn logits_after(prev: u32, margin: f32) -> Vec<f32> {
        let mut l = vec![0.0; 4];
        l[((prev + 1) % 4) as usize] = margin;
        l
    }

    #[test]
    fn agreement_near_ties_and_divergence() {
        // llama.cpp: 1, 2, 3 with margins 5, 5, 0.1
        let mut table = TopKTable::new(4);
        table.push_logits(&logits_after(0, 5.0));
        table.push_logits(&logits_after(1, 5.0));
        table.push_logits(&[0.0, 0.0, 0.0, 0.1]);
        let reference = [1, 2, 3];
        let ours = |margin_last: f32| {
            move |t: u32| -> Result<Vec<f32>, String> {
                Ok(if t == 2 {
                    vec![0.0, 0.0, 0.0, margin_last]
                } else {
                    logits_after(t, 5.0)
                })
            }
        };
        let r = run(
            &reference,
            |i| table.row(i),
            &logits_after(0, 5.0),
            32,
            0.5,
            ours(1.0),
        )
        .unwrap();
        assert_eq!(
            (r.agree, r.outcome, r.ours.clone()),
            (3, Outcome::Agree, vec![1, 2, 3])
        );
        // we pick 0 at step 2 (lowest id among our tied zeros): llama.cpp's
        // margin 0.1 < 0.5, a near-tie
        let r = run(
            &reference,
            |i| table.row(i),
            &logits_after(0, 5.0),
            32,
            0.5,
            ours(-1.0),
        )
        .unwrap();
        assert_eq!((r.agree, r.outcome), (2, Outcome::NearTie));
        let m = r.mismatch.unwrap();
        assert_eq!((m.step, m.ours, m.reference), (2, 0, 3));
        assert!((m.reference_margin_to_ours.unwrap() - 0.1).abs() < 1e-6);
        // the same with epsilon 0.05: a failure
        let r = run(
            &reference,
            |i| table.row(i),
            &logits_after(0, 5.0),
            32,
            0.05,
            ours(-1.0),
        )
        .unwrap();
        assert_eq!(r.outcome, Outcome::Diverged);
        // a wrong first token with a margin of 5: a failure at step 0
        let r = run(
            &reference,
            |i| table.row(i),
            &logits_after(1, 5.0),
            32,
            0.5,
            ours(1.0),
        )
        .unwrap();
        assert_eq!((r.agree, r.outcome), (0, Outcome::Diverged));
        // a step limit
        let r = run(
            &reference,
            |i| table.row(i),
            &logits_after(0, 5.0),
            2,
            0.5,
            ours(1.0),
        )
        .unwrap();
        assert_eq!((r.compared, r.agree, r.outcome), (2, 2, Outcome::Agree));
    }

    #[test]
    fn fewer_agreeing_steps_of_those_both_compared() {
        let g = |agree, compared| GreedyResult {
            reference_len: 32,
            compared,
            agree,
            outcome: Outcome::Agree,
            mismatch: None,
            ours: Vec::new(),
        };
        assert_eq!(g(4, 32).regressions(&g(5, 32)).len(), 1);
        assert!(g(5, 32).regressions(&g(5, 32)).is_empty());
        // Only the steps both compared: 2 of 2 against 5 of 32 is not worse.
        assert!(g(2, 2).regressions(&g(5, 32)).is_empty());
        assert_eq!(g(1, 32).regressions(&g(2, 2)).len(), 1);
    }
}
