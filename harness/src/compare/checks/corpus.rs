//! The corpus check: the engine's next-token distributions over the chunks
//! of a real text against llama.cpp's (a [`CorpusBase`]), as
//! llama-perplexity's KL-divergence run judges two builds: the mean and
//! 99th percentile of the per-position KLD, the top-1 agreement and the
//! perplexity of each.
//!
//! The KLD is over the base's top-64 tokens and one bucket for the rest
//! ([`metrics::kld_top_k`]), not the whole vocabulary that
//! llama-perplexity sums (its rows are 100 kB each); the bucket makes it a
//! lower bound of the full KLD, which on SmolLM2 it follows within a few
//! percent (docs/harness.md, "Corpus").

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::calibration::{limit_text, measured_text, with_headroom, worst_of, Drafted, KLD_FLOOR};
use super::tolerance::{top1_worse, Figure, Found, Reads, Rule, Tolerance, KLD_MEAN, TOP1};
use super::{Check, Level, LimitsEntry};
use crate::compare::sci;
use crate::compare::Failure;
use crate::metrics::{self, TopK};
use crate::reference::corpus::CorpusBase;

/// The limits of the corpus item of one model on one path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorpusLimits {
    /// Mean KLD over every scored position.
    pub kld_mean: f64,
    /// 99th percentile of the per-position KLD.
    pub kld_p99: f64,
    /// The least fraction of positions whose most likely token is the base's.
    pub top1_min: f64,
}

impl CorpusLimits {
    pub fn check(&self, at: &str) -> Result<(), String> {
        for (what, v) in [("kld_mean", self.kld_mean), ("kld_p99", self.kld_p99)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{at}: {what} = {v} (must be finite and >= 0)"));
            }
        }
        if !(0.0..=1.0).contains(&self.top1_min) {
            return Err(format!(
                "{at}: top1_min = {} (a fraction, 0..=1)",
                self.top1_min
            ));
        }
        Ok(())
    }
}

/// One scored position against the base.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PositionKld {
    /// KL(base ‖ ours) over the base's top-k and a tail bucket.
    pub kld: f64,
    /// Our most likely token is the base's.
    pub same_top: bool,
    /// Our −ln p of the next token.
    pub nll: f64,
}

/// Scores our logits of one chunk (`logits`: `[rows, n_vocab]`, its scored
/// positions first) against base rows `row0..row0 + rows`.
pub fn score_chunk(
    base: &CorpusBase,
    chunk: usize,
    logits: &[f32],
    n_vocab: usize,
) -> Vec<PositionKld> {
    let scored = base.scored();
    let tokens = base.chunk_tokens(chunk);
    (0..scored)
        .map(|j| {
            let ours = &logits[j * n_vocab..(j + 1) * n_vocab];
            let row = base.top.row(chunk * scored + j);
            let kld = metrics::kld_top_k(
                TopK {
                    ids: row.ids,
                    logits: row.values,
                    lse: 0.0,
                },
                ours,
            );
            let top = argmax(ours);
            let next = tokens[base.first() + j + 1] as usize;
            let lse = metrics::log_sum_exp(ours);
            PositionKld {
                kld,
                same_top: top == row.ids[0] as usize,
                nll: lse - ours[next] as f64,
            }
        })
        .collect()
}

/// The first index of the largest value (NaN never wins).
fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] || x[best].is_nan() {
            best = i;
        }
    }
    best
}

/// What the corpus item of one model on one path found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CorpusResult {
    /// `corpus:NAME`.
    pub id: String,
    /// The text's file and where the base came from.
    pub text: String,
    pub source: String,
    pub n_ctx: usize,
    pub chunks: usize,
    pub positions: usize,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub kld_mean: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub kld_p99: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub kld_max: f64,
    /// Fraction of positions whose most likely token is the base's.
    #[serde(deserialize_with = "crate::nan::f64")]
    pub top1: f64,
    /// exp(mean NLL) of ours and of the base, over the scored positions.
    #[serde(deserialize_with = "crate::nan::f64")]
    pub ppl: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub ppl_base: f64,
    /// Our tokenization of the text against the base's tokens: None when
    /// the text is not on this machine (or not the same bytes).
    #[serde(default)]
    pub tokens_match: Option<bool>,
    pub limits: Option<CorpusLimits>,
}

impl CorpusResult {
    /// Sums up `scores` (every scored position, in order).
    pub fn new(base: &CorpusBase, scores: &[PositionKld]) -> CorpusResult {
        let n = scores.len().max(1) as f64;
        let mut kld: Vec<f64> = scores.iter().map(|s| s.kld).collect();
        kld.sort_by(f64::total_cmp);
        let mean = |xs: &mut dyn Iterator<Item = f64>| xs.sum::<f64>() / n;
        CorpusResult {
            id: base.item_id(),
            text: base.meta.text.clone(),
            source: base.meta.source.clone(),
            n_ctx: base.meta.n_ctx,
            chunks: base.n_chunk(),
            positions: scores.len(),
            kld_mean: mean(&mut kld.iter().copied()),
            kld_p99: percentile(&kld, 0.99),
            kld_max: kld.last().copied().unwrap_or(f64::NAN),
            top1: mean(&mut scores.iter().map(|s| f64::from(u8::from(s.same_top)))),
            ppl: mean(&mut scores.iter().map(|s| s.nll)).exp(),
            ppl_base: mean(&mut base.nll.iter().map(|&v| f64::from(v))).exp(),
            tokens_match: None,
            limits: None,
        }
    }

    /// A failure when our tokenization of the text is not the base's.
    pub fn tokens_failure(&self) -> Option<Failure> {
        (self.tokens_match == Some(false)).then(|| {
            Failure::new(
                "corpus",
                format!(
                    "{}: our tokenization of {} differs from the base's tokens",
                    self.id, self.text
                ),
            )
        })
    }

    /// Holds the figures to `limits`; a failure per figure over its limit.
    pub fn judge(&mut self, limits: &CorpusLimits, failures: &mut Vec<Failure>) {
        let nan = |v: f64| v.is_nan();
        if nan(self.kld_mean) || self.kld_mean > limits.kld_mean {
            failures.push(Failure::new(
                "corpus",
                format!(
                    "{}: KLD mean {:.4e} over {} positions > {:.1e}",
                    self.id, self.kld_mean, self.positions, limits.kld_mean
                ),
            ));
        }
        if nan(self.kld_p99) || self.kld_p99 > limits.kld_p99 {
            failures.push(Failure::new(
                "corpus",
                format!(
                    "{}: KLD p99 {:.4e} > {:.1e}",
                    self.id, self.kld_p99, limits.kld_p99
                ),
            ));
        }
        if nan(self.top1) || self.top1 < limits.top1_min {
            failures.push(Failure::new(
                "corpus",
                format!(
                    "{}: top-1 agreement {:.2} % < {:.2} %",
                    self.id,
                    100.0 * self.top1,
                    100.0 * limits.top1_min
                ),
            ));
        }
        self.limits = Some(limits.clone());
    }
}

/// llama-perplexity's percentile: `p = fraction · (n − 1)`, linear between
/// the neighbours (NaN for no values).
pub fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let p = fraction.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let i = p as usize;
    let t = p - i as f64;
    (1.0 - t) * sorted[i] + t * sorted[(i + 1).min(sorted.len() - 1)]
}

/// What the corpus's `top1_min` leaves below the lowest agreement
/// measured: 0.05 is 13 of 255 positions (one chunk of 512), about three
/// times the binomial spread of a 95 % agreement there.
pub const CORPUS_TOP1_MARGIN: f64 = 0.05;

/// The corpus's 99th-percentile KLD: +25%, floor 1e-6 nats.
pub const KLD_P99: Figure = Figure {
    name: "kld_p99",
    reads: Reads::Sci,
    rule: Rule::Grows(Tolerance {
        factor: 1.25,
        floor: 1e-6,
    }),
};

impl Check for CorpusResult {
    const KEY: &'static str = "corpus";
    const LEVEL: Level = Level::Prompt;
    const MEASURES: &'static str =
        "the next-token distributions over a real text's chunks against llama.cpp's base (KLD mean and p99, top-1, perplexity)";
    const LIMIT_KEYS: &'static [&'static str] =
        &["corpus.kld_mean", "corpus.kld_p99", "corpus.top1_min"];
    const NULL_WHEN_ABSENT: bool = false;

    /// The `[model.key.corpus]` table: KLD mean and p99 at the worst
    /// measured times the headroom; `top1_min` the lowest agreement less
    /// [`CORPUS_TOP1_MARGIN`], down to a multiple of 0.01. Errors: a corpus
    /// on a path without prompts (its table has no entry to join).
    fn calibrate(entry: &LimitsEntry) -> Result<Vec<Drafted>, String> {
        let cs: Vec<(&CorpusResult, String)> = entry
            .results::<CorpusResult>()
            .map(|(c, m)| (c, format!("{} {}", c.id, m.path)))
            .collect();
        if cs.is_empty() {
            return Ok(Vec::new());
        }
        if cs.len() == entry.items.len() {
            return Err(format!(
                "{} {}: the corpus was measured without a prompt on that path; \
                 calibrate it together with the prompts (its limits are a table of the path's entry)",
                entry.model, entry.key
            ));
        }
        let h = entry.rules.headroom;
        let mut text = String::new();
        let _ = writeln!(text, "[{}.corpus]", entry.table());
        type Of = fn(&CorpusResult) -> f64;
        let figures: [(&str, Of); 2] = [("kld_mean", |c| c.kld_mean), ("kld_p99", |c| c.kld_p99)];
        for (name, f) in figures {
            let w = worst_of(cs.iter().map(|(c, at)| (f(c), at.clone())), true)
                .expect("a corpus entry has a measurement");
            entry.finite(&format!("corpus {name}"), &w)?;
            let _ = writeln!(
                text,
                "{name} = {}  # measured {} ({}), x{h}",
                limit_text(with_headroom(w.value, entry.rules, KLD_FLOOR)),
                measured_text(w.value),
                w.at
            );
        }
        let w = worst_of(cs.iter().map(|(c, at)| (c.top1, at.clone())), false)
            .expect("a corpus entry has a measurement");
        let top1 = (((w.value - CORPUS_TOP1_MARGIN) * 100.0).floor() / 100.0).clamp(0.0, 1.0);
        let _ = writeln!(
            text,
            "top1_min = {top1:.2}  # measured {:.4} ({}), less {CORPUS_TOP1_MARGIN}\n",
            w.value, w.at
        );
        Ok(vec![Drafted {
            key: "corpus",
            text,
        }])
    }

    const FIGURES: &'static [Figure] = &[KLD_MEAN, KLD_P99, TOP1];

    /// The corpus's KLD mean and p99, and its top-1 agreement.
    fn regressions(&self, baseline: &CorpusResult) -> Vec<Found> {
        let (b, n) = (baseline, self);
        let mut out: Vec<Found> = [
            Found::grown(KLD_MEAN, "corpus KLD mean", b.kld_mean, n.kld_mean),
            Found::grown(KLD_P99, "corpus KLD p99", b.kld_p99, n.kld_p99),
        ]
        .into_iter()
        .flatten()
        .collect();
        let agree =
            |c: &CorpusResult| ((c.top1 * c.positions as f64).round() as usize, c.positions);
        if top1_worse(agree(b), agree(n)) {
            out.push(Found {
                figure: TOP1,
                baseline: b.top1,
                now: n.top1,
                detail: format!(
                    "corpus top-1 agreement {}/{} against {}/{} in the baseline",
                    agree(n).0,
                    n.positions,
                    agree(b).0,
                    b.positions
                ),
            });
        }
        out
    }

    fn summary(&self) -> String {
        format!(
            "KLD mean {}, p99 {}, top-1 {:.2}%",
            sci(self.kld_mean),
            sci(self.kld_p99),
            100.0 * self.top1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::corpus::CorpusMeta;
    use crate::reference::TopKTable;

    /// A base of one chunk over a vocabulary of 8 whose rows are
    /// `logits` (every position the same), k = 4.
    fn base(n_ctx: usize, logits: &[f32]) -> CorpusBase {
        let tokens: Vec<u32> = (0..n_ctx as u32).map(|i| i % 8).collect();
        let lse = metrics::log_sum_exp(logits);
        let scored = n_ctx - 1 - n_ctx / 2;
        let mut top = TopKTable::new(4);
        let mut nll = Vec::new();
        for j in 0..scored {
            let (ids, values, _) = crate::reference::arrays::top_k_lse(logits, 4);
            top.ids.extend(ids);
            top.values
                .extend(values.iter().map(|&v| (v as f64 - lse) as f32));
            top.lse.push(0.0);
            nll.push((lse - logits[tokens[n_ctx / 2 + j + 1] as usize] as f64) as f32);
        }
        let b = CorpusBase {
            meta: CorpusMeta {
                name: "t".into(),
                text: "/t".into(),
                text_sha256: "00".into(),
                source: "test".into(),
                n_ctx,
                n_vocab: 8,
            },
            tokens,
            top,
            nll,
        };
        b.check().unwrap();
        b
    }

    const Z: [f32; 8] = [2.0, 1.0, 0.5, 0.0, -1.0, -2.0, -3.0, -4.0];

    #[test]
    fn the_base_itself_scores_zero_and_its_own_perplexity() {
        let b = base(10, &Z);
        let logits: Vec<f32> = (0..5).flat_map(|_| Z).collect();
        let scores = score_chunk(&b, 0, &logits, 8);
        assert_eq!(scores.len(), 4);
        let r = CorpusResult::new(&b, &scores);
        assert!(r.kld_mean.abs() < 1e-6 && r.kld_max.abs() < 1e-6, "{r:?}");
        assert_eq!(r.top1, 1.0);
        assert!((r.ppl / r.ppl_base - 1.0).abs() < 1e-6);
        let mut f = Vec::new();
        let mut r = r;
        r.judge(
            &CorpusLimits {
                kld_mean: 1e-5,
                kld_p99: 1e-5,
                top1_min: 1.0,
            },
            &mut f,
        );
        assert!(f.is_empty(), "{f:?}");
    }

    #[test]
    fn a_swapped_top_token_fails_every_figure() {
        let b = base(10, &Z);
        let mut ours = Z;
        ours.swap(0, 3);
        let logits: Vec<f32> = (0..5).flat_map(|_| ours).collect();
        let mut r = CorpusResult::new(&b, &score_chunk(&b, 0, &logits, 8));
        assert!(r.kld_mean > 0.3, "{r:?}");
        assert_eq!(r.top1, 0.0);
        let mut f = Vec::new();
        r.judge(
            &CorpusLimits {
                kld_mean: 0.1,
                kld_p99: 0.1,
                top1_min: 0.9,
            },
            &mut f,
        );
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f.iter().all(|x| x.check == "corpus"));
    }

    #[test]
    fn percentile_interpolates_as_llama_perplexity() {
        let v = [0.0, 1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), 2.0);
        assert!((percentile(&v, 0.99) - 3.96).abs() < 1e-12);
        assert_eq!(percentile(&v, 1.0), 4.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn corpus_figures_regress_by_their_rules() {
        let base = CorpusResult {
            id: "corpus:t".into(),
            text: "/t".into(),
            source: "test".into(),
            n_ctx: 512,
            chunks: 1,
            positions: 255,
            kld_mean: 3e-3,
            kld_p99: 1.4e-2,
            kld_max: 2e-2,
            top1: 237.0 / 255.0,
            ppl: 16.4,
            ppl_base: 16.3,
            tokens_match: Some(true),
            limits: None,
        };
        assert!(base.regressions(&base).is_empty());
        let mut now = base.clone();
        now.kld_mean = 3.2e-3; // +7%: within
        now.kld_p99 = 1.8e-2; // +29%: worse
        now.top1 = 236.0 / 255.0; // one position fewer
        let found: Vec<&str> = now
            .regressions(&base)
            .into_iter()
            .map(|f| f.figure.name)
            .collect();
        assert_eq!(found, ["kld_p99", "top1"]);
    }
}
