//! The sampler against llama.cpp's chain ([`crate::reference::sampling`]):
//! for each captured case, sharpi's [`Sampler`] on the same logits, with
//! the same settings and seed, after accepting the same prompt tokens,
//! must keep the same candidates at every selecting stage (same ids, same
//! order) and draw the same tokens.
//!
//! The one difference allowed is llama.cpp's unstable sorts: where two
//! candidates have exactly equal logits, its order between them is its
//! sort's and ours puts the lower id first. A stage whose kept ids differ
//! from llama.cpp's only among candidates whose logit equals another's
//! (same set in another order, or a cut between equal logits) is a
//! **tie**: reported, not a failure, and the case's later draws are not
//! compared (they follow from the order). Anything else is a mismatch.

use serde::{Deserialize, Serialize};

use engine::sampler::{Candidates, Sampler, Stage};

use super::{Check, Level};
use crate::reference::sampling::{ids_hash, SamplingCapture, SamplingCase, StageKept};

/// What the comparison found for one model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingCheck {
    /// Cases (prompt × set × seed) compared.
    pub cases: usize,
    /// Stage results compared, and equal.
    pub stages: usize,
    pub stages_equal: usize,
    /// Draws compared, and equal.
    pub draws: usize,
    pub draws_equal: usize,
    /// Cases cut short at a tie of equal logits.
    pub ties: Vec<String>,
    /// Every mismatch, one line each.
    pub mismatches: Vec<String>,
}

impl SamplingCheck {
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// Our candidates after one stage (first draw).
struct Seen {
    stage: &'static str,
    ids: Vec<u32>,
    logits: Vec<f32>,
}

/// Whether our `ours` and llama.cpp's `theirs` differ only among equal
/// logits: the same multiset of logits position by position (so an order
/// change swaps equal logits), or, for a cut, the ids in one list only all
/// carrying the smallest kept logit, which another candidate shares.
fn tie_only(ours: &Seen, theirs: &[u32]) -> bool {
    let logit_of = |id: u32| -> Option<f32> {
        ours.ids
            .iter()
            .position(|&x| x == id)
            .map(|i| ours.logits[i])
    };
    if ours.ids.len() == theirs.len() {
        // Same positions must hold equal logits.
        return theirs
            .iter()
            .zip(&ours.logits)
            .all(|(&t, &l)| logit_of(t).is_none_or(|lt| lt == l))
            && ours.ids.iter().zip(theirs).any(|(a, b)| a != b);
    }
    // A different cut: ours lists what we kept; ids only theirs we cannot
    // price, so the boundary logit must be shared inside ours.
    let Some(&min) = ours.logits.iter().min_by(|a, b| a.total_cmp(b)) else {
        return false;
    };
    let shared = ours.logits.iter().filter(|&&l| l == min).count() > 1;
    let only_ours = ours.ids.iter().filter(|id| !theirs.contains(id));
    shared && only_ours.clone().all(|&id| logit_of(id) == Some(min))
}

/// Compares one case; `prompt`: its prompt's tokens, `logits`: its last
/// logits.
fn check_case(
    capture: &SamplingCapture,
    case: &SamplingCase,
    prompt: &[i32],
    logits: &[f32],
    out: &mut SamplingCheck,
) {
    let at = format!("{}/{}/seed {}", case.prompt, case.set, case.seed);
    let Some(set) = capture.sets.iter().find(|s| s.id == case.set) else {
        out.mismatches.push(format!("{at}: no set {:?}", case.set));
        return;
    };
    let mut sampler = match Sampler::new(set.config(case.seed)) {
        Ok(s) => s,
        Err(e) => {
            out.mismatches.push(format!("{at}: {e}"));
            return;
        }
    };
    for &t in prompt {
        sampler.accept(t as u32);
    }
    out.cases += 1;
    for (draw, &want) in case.tokens.iter().enumerate() {
        let mut seen: Vec<Seen> = Vec::new();
        let token = sampler.sample_traced(logits, |stage, c: &Candidates| {
            if draw == 0 && selecting(stage) {
                seen.push(Seen {
                    stage: stage.name(),
                    ids: c.ids(),
                    logits: c.items.iter().map(|x| x.logit).collect(),
                });
            }
        });
        if draw == 0 {
            match compare_stages(&at, &seen, &case.stages, out) {
                Verdict::Equal => {}
                Verdict::Tie(line) => {
                    out.ties.push(line);
                    return;
                }
                Verdict::Mismatch => return,
            }
        }
        out.draws += 1;
        if token == want {
            out.draws_equal += 1;
        } else {
            out.mismatches.push(format!(
                "{at}: draw {}: token {token}, llama.cpp {want}",
                draw + 1
            ));
            return;
        }
        sampler.accept(token);
    }
}

/// The stages that choose candidates (their kept ids are captured).
fn selecting(stage: Stage) -> bool {
    matches!(
        stage,
        Stage::TopK | Stage::Typical | Stage::TopP | Stage::MinP
    )
}

/// How the first draw's stages compared.
enum Verdict {
    Equal,
    /// Different only among equal logits: the case stops, reported.
    Tie(String),
    /// Recorded in the mismatches: the case stops.
    Mismatch,
}

/// Compares the first draw's stages with llama.cpp's.
fn compare_stages(
    at: &str,
    seen: &[Seen],
    theirs: &[StageKept],
    out: &mut SamplingCheck,
) -> Verdict {
    let names = |v: &mut dyn Iterator<Item = &str>| v.collect::<Vec<_>>().join(",");
    if seen.len() != theirs.len() || seen.iter().zip(theirs).any(|(a, b)| a.stage != b.stage) {
        out.mismatches.push(format!(
            "{at}: stages [{}], llama.cpp [{}]",
            names(&mut seen.iter().map(|s| s.stage)),
            names(&mut theirs.iter().map(|s| s.stage.as_str()))
        ));
        return Verdict::Mismatch;
    }
    for (ours, t) in seen.iter().zip(theirs) {
        out.stages += 1;
        let equal = ours.ids.len() == t.n
            && ids_hash(&ours.ids) == t.hash
            && t.ids.as_ref().is_none_or(|ids| *ids == ours.ids);
        if equal {
            out.stages_equal += 1;
            continue;
        }
        let listed = t.ids.as_deref();
        if listed.is_some_and(|ids| tie_only(ours, ids)) {
            return Verdict::Tie(format!(
                "{at}: {} kept {} candidates, llama.cpp {}, differing only among equal logits",
                ours.stage,
                ours.ids.len(),
                t.n
            ));
        }
        out.mismatches.push(format!(
            "{at}: {} kept {} candidates, llama.cpp {}{}",
            ours.stage,
            ours.ids.len(),
            t.n,
            match listed {
                Some(ids) => first_difference(&ours.ids, ids),
                None => " (hash differs)".into(),
            }
        ));
        return Verdict::Mismatch;
    }
    Verdict::Equal
}

fn first_difference(a: &[u32], b: &[u32]) -> String {
    match (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
        Some(i) => format!(
            " (first difference at {i}: {:?} against {:?})",
            a.get(i),
            b.get(i)
        ),
        None => String::new(),
    }
}

/// Runs every case of `capture`; `prompt_data(prompt)` gives a prompt's
/// tokens and last logits.
pub fn check(
    capture: &SamplingCapture,
    mut prompt_data: impl FnMut(&str) -> Result<(Vec<i32>, Vec<f32>), String>,
) -> SamplingCheck {
    let mut out = SamplingCheck::default();
    if let Err(e) = capture.check() {
        out.mismatches.push(format!("sampling.json: {e}"));
        return out;
    }
    let mut cache: Option<(String, Vec<i32>, Vec<f32>)> = None;
    for case in &capture.cases {
        if cache.as_ref().is_none_or(|c| c.0 != case.prompt) {
            match prompt_data(&case.prompt) {
                Ok((t, l)) => cache = Some((case.prompt.clone(), t, l)),
                Err(e) => {
                    out.mismatches.push(format!("{}: {e}", case.prompt));
                    cache = None;
                    continue;
                }
            }
        }
        let (_, tokens, logits) = cache.as_ref().expect("loaded above");
        check_case(capture, case, tokens, logits, &mut out);
    }
    out
}

impl Check for SamplingCheck {
    const KEY: &'static str = "sampling";
    const LABEL: &'static str = "(sampling)";
    const LEVEL: Level = Level::Model;
    const MEASURES: &'static str =
        "the sampler against llama.cpp's chain on the captured logits: every stage's candidates and every draw";
    const LIMIT_KEYS: &'static [&'static str] = &[];
    const NULL_WHEN_ABSENT: bool = false;

    fn summary(&self) -> String {
        format!(
            "{}/{} draws, {}/{} stages, {} ties",
            self.draws_equal,
            self.draws,
            self.stages_equal,
            self.stages,
            self.ties.len()
        )
    }

    fn passed(&self) -> bool {
        SamplingCheck::passed(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::sampling::{grid, SAMPLING_FORMAT};

    /// A capture whose expected results are sharpi's own (so it passes),
    /// over a small vocabulary with one exact tie.
    fn own_capture(logits: &[f32], prompt: &[i32]) -> SamplingCapture {
        let sets = grid();
        let mut cases = Vec::new();
        for set in &sets {
            for seed in [0u32, 7] {
                let mut s = Sampler::new(set.config(seed)).unwrap();
                for &t in prompt {
                    s.accept(t as u32);
                }
                let mut stages = Vec::new();
                let mut tokens = Vec::new();
                for draw in 0..4 {
                    let t = s.sample_traced(logits, |stage, c| {
                        if draw == 0 && selecting(stage) {
                            stages.push(StageKept::new(stage.name(), &c.ids()));
                        }
                    });
                    s.accept(t);
                    tokens.push(t);
                }
                cases.push(SamplingCase {
                    prompt: "p".into(),
                    set: set.id.clone(),
                    seed,
                    stages,
                    tokens,
                });
            }
        }
        SamplingCapture {
            format: SAMPLING_FORMAT.into(),
            llama_cpp: "test".into(),
            draws: 4,
            sets,
            cases,
        }
    }

    fn logits() -> Vec<f32> {
        (0..300)
            .map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.0)
            .collect()
    }

    #[test]
    fn the_same_chain_passes_and_a_changed_token_fails() {
        let l = logits();
        let prompt = [3, 5, 5, 9];
        let mut cap = own_capture(&l, &prompt);
        let data = |_: &str| Ok((prompt.to_vec(), l.clone()));
        let r = check(&cap, data);
        assert!(r.passed(), "{r:?}");
        assert_eq!(r.cases, cap.cases.len());
        assert_eq!(r.draws, r.draws_equal);
        cap.cases[3].tokens[2] ^= 1;
        let r = check(&cap, |_: &str| Ok((prompt.to_vec(), l.clone())));
        assert_eq!(r.mismatches.len(), 1, "{r:?}");
        assert!(r.mismatches[0].contains("draw 3"), "{r:?}");
    }

    #[test]
    fn a_reordered_tie_is_reported_and_a_changed_set_fails() {
        // Two equal top logits: ids 0 and 1.
        let mut l = vec![0.0f32; 50];
        l[0] = 5.0;
        l[1] = 5.0;
        l[2] = 4.0;
        let prompt: [i32; 0] = [];
        let mut cap = own_capture(&l, &prompt);
        let i = cap.cases.iter().position(|c| c.set == "defaults").unwrap();
        // llama.cpp's sort put 1 before 0.
        let top_k = &mut cap.cases[i].stages[0];
        let mut ids = top_k.ids.clone().unwrap();
        ids.swap(0, 1);
        *top_k = StageKept::new("top-k", &ids);
        let r = check(&cap, |_: &str| Ok((prompt.to_vec(), l.clone())));
        assert!(r.passed(), "{r:?}");
        assert_eq!(r.ties.len(), 1, "{r:?}");
        // A set that differs at unequal logits is a mismatch.
        let top_k = &mut cap.cases[i].stages[0];
        let mut ids = top_k.ids.clone().unwrap();
        ids.swap(0, 2);
        *top_k = StageKept::new("top-k", &ids);
        let r = check(&cap, |_: &str| Ok((prompt.to_vec(), l.clone())));
        assert_eq!(r.mismatches.len(), 1, "{r:?}");
    }
}
