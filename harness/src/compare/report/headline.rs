//! The one finding a reader should see first: the **first divergence**
//! of a failing run ([`first_divergence`]), shown at the top of the HTML
//! page and above the terminal's list of failing checks.
//!
//! The choice: among the tap divergences (each prompt and path's first tap
//! over its limit, against llama.cpp or against the run's first path), the
//! earliest in graph order (the layer, then the tap's place in its layer's
//! computation; a tap before the layers first, one after them last); ties
//! go to the first in report order (model, prompt, path, then against
//! llama.cpp before against the first path). A failing run without a tap
//! divergence (a token, KLD or greedy failure, say) headlines its first
//! failing check in report order.

use crate::compare::checks::taps::{TapRow, TapsResult};
use crate::compare::{Failure, Path};

/// What [`first_divergence`] picked.
#[derive(Clone, Debug, PartialEq)]
pub enum Headline<'a> {
    /// A tap over its limit.
    Tap {
        model: &'a str,
        prompt: &'a str,
        path: Path,
        /// None: against llama.cpp; else against this path (the run's
        /// first).
        against: Option<Path>,
        row: &'a TapRow,
    },
    /// Another failing check (`at`: `model` or `model/prompt/path`).
    Check { at: String, failure: &'a Failure },
}

impl Headline<'_> {
    /// The finding in one line: where, which tensor, its figure against
    /// its limit.
    pub fn line(&self) -> String {
        match self {
            Headline::Tap {
                model,
                prompt,
                path,
                against,
                row,
            } => format!(
                "{model} / {prompt} / {} / {}, {}: NMSE {:.3e} > limit {:.1e}",
                source(*path, *against),
                row.layer
                    .map_or("outside the layers".to_string(), |l| format!("layer {l}")),
                tensor(row),
                row.nmse,
                row.limit
            ),
            Headline::Check { at, failure } => {
                format!("{at}: {}: {}", failure.check, failure.detail)
            }
        }
    }
}

/// `Qcur (llama.cpp Qcur-0#2 ROPE)`: our tap and the reference's node.
pub fn tensor(row: &TapRow) -> String {
    let op = if row.op.is_empty() {
        String::new()
    } else {
        format!(" {}", row.op)
    };
    format!("{} (llama.cpp {}{op})", row.name, row.reference)
}

/// `cpu against llama.cpp` or `gpu against cpu`.
pub fn source(path: Path, against: Option<Path>) -> String {
    match against {
        Some(a) => format!("{path} against {a}"),
        None => format!("{path} against llama.cpp"),
    }
}

/// Where a tap divergence sits in graph order: (layer, place in the rows);
/// a tap outside the layers before them when it comes first, else after.
fn graph_order(t: &TapsResult, d: &TapRow) -> (i64, usize) {
    let i = t.rows.iter().position(|r| r == d).unwrap_or(usize::MAX);
    let layer = match d.layer {
        Some(l) => l as i64,
        None if t.rows[..i.min(t.rows.len())]
            .iter()
            .any(|r| r.layer.is_some()) =>
        {
            i64::MAX
        }
        None => -1,
    };
    (layer, i)
}

/// A tap comparison that may hold the first divergence: one prompt on
/// one path, against llama.cpp (`against` None) or against a path.
pub struct Candidate<'a> {
    pub model: &'a str,
    pub prompt: &'a str,
    pub path: Path,
    pub against: Option<Path>,
    pub taps: &'a TapsResult,
}

/// The first divergence among `candidates` (in report order), else
/// `first_failure` (the report's first failing check and where), else
/// None: nothing failed.
pub fn first_divergence<'a>(
    candidates: impl IntoIterator<Item = Candidate<'a>>,
    first_failure: Option<(String, &'a Failure)>,
) -> Option<Headline<'a>> {
    let mut best: Option<((i64, usize), Headline)> = None;
    for c in candidates {
        let Some(d) = &c.taps.first_divergence else {
            continue;
        };
        let order = graph_order(c.taps, d);
        if best.as_ref().is_none_or(|(o, _)| order < *o) {
            best = Some((
                order,
                Headline::Tap {
                    model: c.model,
                    prompt: c.prompt,
                    path: c.path,
                    against: c.against,
                    row: d,
                },
            ));
        }
    }
    match best {
        Some((_, h)) => Some(h),
        None => first_failure.map(|(at, failure)| Headline::Check { at, failure }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::checks::cross::CrossResult;
    use crate::compare::sample;

    fn tap(h: &Headline) -> (String, Path, Option<Path>, String) {
        match h {
            Headline::Tap {
                prompt,
                path,
                against,
                row,
                ..
            } => (
                prompt.to_string(),
                *path,
                *against,
                format!("{}-{}", row.name, row.layer.unwrap()),
            ),
            Headline::Check { .. } => panic!("not a tap: {h:?}"),
        }
    }

    #[test]
    fn the_earliest_tap_over_its_limit_then_report_order() {
        let mut r = sample::report();
        // sample: gpu diverges at l_out-1 (cpu and gpu~cpu do not).
        let h = r.first_divergence().unwrap();
        assert_eq!(
            tap(&h),
            ("capital".into(), Path::Gpu, None, "l_out-1".into())
        );
        assert!(
            h.line().starts_with(
                "smol / capital / gpu against llama.cpp / layer 1, l_out (llama.cpp l_out-1): NMSE 1.200e-3 > limit 1.0e-3"
            ),
            "{}",
            h.line()
        );
        // An earlier divergence on a later prompt wins: Qcur-0 of gpu~cpu.
        let mut later = r.models[0].prompts[1].clone();
        later.prompt = "later".into();
        let vs = later
            .checks
            .get_mut::<CrossResult>()
            .unwrap()
            .taps
            .as_mut()
            .unwrap();
        vs.rows[1].pass = false;
        vs.first_divergence = Some(vs.rows[1].clone());
        r.models[0].prompts.push(later.clone());
        let h = r.first_divergence().unwrap();
        assert_eq!(
            tap(&h),
            ("later".into(), Path::Gpu, Some(Path::Cpu), "Qcur-0".into())
        );
        // The same tap on an earlier prompt: report order decides.
        let mut again = later;
        again.prompt = "last".into();
        r.models[0].prompts.push(again);
        assert_eq!(tap(&r.first_divergence().unwrap()).0, "later");
    }

    #[test]
    fn without_a_tap_divergence_the_first_failing_check() {
        let mut r = sample::report();
        for p in &mut r.models[0].prompts {
            p.checks.get_mut::<TapsResult>().unwrap().first_divergence = None;
        }
        // The model-level chat failure comes first in report order.
        match r.first_divergence().unwrap() {
            Headline::Check { at, failure } => {
                assert_eq!((at.as_str(), failure.check.as_str()), ("smol", "chat"))
            }
            h => panic!("{h:?}"),
        }
        r.models[0].failures.clear();
        for p in &mut r.models[0].prompts {
            p.failures.clear();
        }
        assert_eq!(r.first_divergence(), None);
    }
}
