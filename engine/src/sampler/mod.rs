//! Choosing the next token from a step's logits, as llama.cpp's sampler
//! chain chooses it (`common/sampling.cpp`'s default order over
//! `src/llama-sampler.cpp`'s samplers), stage for stage ([`stages`]):
//!
//! 1. penalties: tokens among the last `repeat_last_n` accepted ones get
//!    their logit divided by `repeat_penalty` when positive, multiplied
//!    when not, then `count · frequency_penalty + presence_penalty`
//!    subtracted;
//! 2. top-k: the `top_k` highest logits, sorted (0: off);
//! 3. typical-p: the tokens whose surprise is nearest the entropy, up to
//!    `typical_p` of the probability (1: off);
//! 4. top-p: the shortest sorted prefix reaching `top_p` (1: off);
//! 5. min-p: the tokens at least `min_p` times as likely as the likeliest
//!    (0: off);
//! 6. temperature: logits divided by `temp`;
//! 7. dist: softmax and one uniform draw, the first candidate (in the
//!    order the stages left) at which the running sum reaches the draw.
//!
//! With `temp == 0` the choice is greedy: the highest logit after the
//! penalties, the lowest id among equals (llama.cpp's greedy sampler keeps
//! the first maximum).
//!
//! The draw is llama.cpp's: `std::mt19937` seeded with the 32-bit seed and
//! libstdc++'s `uniform_real_distribution<double>` ([`mt19937`]), one
//! draw per sampled token whatever the candidates. So for the same logits,
//! settings and seed sharpi draws llama.cpp's tokens; `harness compare`
//! checks it against llama.cpp's own chain (docs/sampling.md), where the
//! only residual is the order of exactly equal logits (llama.cpp's sorts
//! are not stable; ours puts the lower id first).

pub mod mt19937;
pub mod stages;

use std::collections::{HashMap, VecDeque};

pub use mt19937::Mt19937;
pub use stages::{by_logit, dist, penalized, Candidate, Candidates};

/// The sampling settings (llama.cpp's names and defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Temperature; 0: greedy.
    pub temp: f32,
    /// Keep the `top_k` highest logits; 0: all.
    pub top_k: usize,
    /// Locally typical sampling: keep this much probability nearest the
    /// entropy; 1: off.
    pub typical_p: f32,
    /// Nucleus: keep the smallest set with this much probability; 1: all.
    pub top_p: f32,
    /// Keep tokens at least this fraction as likely as the likeliest; 0: all.
    pub min_p: f32,
    /// Penalty of recently seen tokens; 1: none.
    pub repeat_penalty: f32,
    /// Subtracted from a recent token's logit per occurrence; 0: none.
    pub frequency_penalty: f32,
    /// Subtracted from a recent token's logit once; 0: none.
    pub presence_penalty: f32,
    /// How many of the last accepted tokens the penalties look at; 0: none.
    pub repeat_last_n: usize,
    /// llama.cpp's seeds are 32-bit.
    pub seed: u32,
}

impl Default for SamplerConfig {
    /// llama.cpp's defaults (`common_params_sampling`), seed 0.
    fn default() -> SamplerConfig {
        SamplerConfig {
            temp: 0.8,
            top_k: 40,
            typical_p: 1.0,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding (`temp` 0), nothing else changed.
    pub fn greedy() -> SamplerConfig {
        SamplerConfig {
            temp: 0.0,
            ..SamplerConfig::default()
        }
    }

    /// Checks every value; the error names the first bad one.
    pub fn validate(&self) -> Result<(), SamplerError> {
        let bad = |name, value: f32, rule| {
            Err(SamplerError {
                name,
                value: value.to_string(),
                rule,
            })
        };
        if !(self.temp.is_finite() && self.temp >= 0.0) {
            return bad("temp", self.temp, "a number >= 0 (0: greedy)");
        }
        if !(0.0..=1.0).contains(&self.typical_p) {
            return bad("typical", self.typical_p, "between 0 and 1 (1: off)");
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return bad("top-p", self.top_p, "between 0 and 1 (1: off)");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min-p", self.min_p, "between 0 and 1 (0: off)");
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad(
                "repeat-penalty",
                self.repeat_penalty,
                "a number > 0 (1: off)",
            );
        }
        if !self.frequency_penalty.is_finite() {
            return bad(
                "frequency-penalty",
                self.frequency_penalty,
                "a finite number (0: off)",
            );
        }
        if !self.presence_penalty.is_finite() {
            return bad(
                "presence-penalty",
                self.presence_penalty,
                "a finite number (0: off)",
            );
        }
        Ok(())
    }

    /// Whether the penalties change anything (llama.cpp's `is_disabled`).
    fn penalizes(&self) -> bool {
        self.repeat_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.frequency_penalty != 0.0
                || self.presence_penalty != 0.0)
    }
}

/// A sampling setting out of its range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid --{name} {value}: must be {rule}")]
pub struct SamplerError {
    /// The setting, as the command line spells it ("top-p").
    pub name: &'static str,
    pub value: String,
    pub rule: &'static str,
}

/// A stage of the chain, as [`Sampler::sample_traced`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    Penalties,
    TopK,
    Typical,
    TopP,
    MinP,
    Temperature,
}

impl Stage {
    /// llama.cpp's sampler name.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Penalties => "penalties",
            Stage::TopK => "top-k",
            Stage::Typical => "typical",
            Stage::TopP => "top-p",
            Stage::MinP => "min-p",
            Stage::Temperature => "temp-ext",
        }
    }
}

/// A sampler: the settings, the draw generator and the penalty window.
pub struct Sampler {
    cfg: SamplerConfig,
    rng: Mt19937,
    /// The last `repeat_last_n` accepted tokens, oldest first.
    recent: VecDeque<u32>,
    /// How often each token occurs in `recent`.
    counts: HashMap<u32, u32>,
    /// Scratch: the candidates of one step, and a copy of its logits.
    cands: Candidates,
    logits: Vec<f32>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("cfg", &self.cfg)
            .field("recent", &self.recent.len())
            .finish_non_exhaustive()
    }
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Result<Sampler, SamplerError> {
        cfg.validate()?;
        Ok(Sampler {
            rng: Mt19937::new(cfg.seed),
            cfg,
            recent: VecDeque::new(),
            counts: HashMap::new(),
            cands: Candidates::default(),
            logits: Vec::new(),
        })
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Forgets the accepted tokens and restarts the draws from the seed.
    pub fn reset(&mut self) {
        self.rng = Mt19937::new(self.cfg.seed);
        self.recent.clear();
        self.counts.clear();
    }

    /// Remembers a token of the sequence for the penalties (llama.cpp
    /// accepts the prompt's tokens and each sampled one).
    pub fn accept(&mut self, token: u32) {
        let n = self.cfg.repeat_last_n;
        if n == 0 {
            return;
        }
        if self.recent.len() >= n {
            if let Some(old) = self.recent.pop_front() {
                if let Some(c) = self.counts.get_mut(&old) {
                    *c -= 1;
                    if *c == 0 {
                        self.counts.remove(&old);
                    }
                }
            }
        }
        self.recent.push_back(token);
        *self.counts.entry(token).or_insert(0) += 1;
    }

    /// The next token for `logits` (one per vocabulary entry).
    ///
    /// # Panics
    /// On empty logits.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.sample_traced(logits, |_, _| {})
    }

    /// [`sample`](Self::sample), calling `trace(stage, candidates)` after
    /// each stage that runs (not for greedy decoding).
    pub fn sample_traced(
        &mut self,
        logits: &[f32],
        mut trace: impl FnMut(Stage, &Candidates),
    ) -> u32 {
        assert!(!logits.is_empty(), "sample: no logits");
        let cfg = &self.cfg;
        let penalize = cfg.penalizes() && !self.counts.is_empty();
        if cfg.temp == 0.0 {
            if !penalize {
                return greedy(logits);
            }
            let mut c = Candidates::from_logits(logits);
            stages::penalties(
                &mut c,
                &self.counts,
                cfg.repeat_penalty,
                cfg.frequency_penalty,
                cfg.presence_penalty,
            );
            self.logits.clear();
            self.logits.extend(c.items.iter().map(|x| x.logit));
            return greedy(&self.logits);
        }
        let u = self.rng.uniform();
        let c = &mut self.cands;
        c.reset(logits);
        if cfg.penalizes() {
            stages::penalties(
                c,
                &self.counts,
                cfg.repeat_penalty,
                cfg.frequency_penalty,
                cfg.presence_penalty,
            );
            trace(Stage::Penalties, c);
        }
        if cfg.top_k > 0 {
            stages::top_k(c, cfg.top_k);
            trace(Stage::TopK, c);
        }
        if cfg.typical_p < 1.0 {
            stages::typical(c, cfg.typical_p);
            trace(Stage::Typical, c);
        }
        if cfg.top_p < 1.0 {
            stages::top_p(c, cfg.top_p);
            trace(Stage::TopP, c);
        }
        if cfg.min_p > 0.0 {
            stages::min_p(c, cfg.min_p);
            trace(Stage::MinP, c);
        }
        stages::temperature(c, cfg.temp);
        trace(Stage::Temperature, c);
        let i = dist(c, u);
        c.items[i].id
    }
}

/// The index of the highest logit, the lowest among equals (llama.cpp's
/// greedy sampler: a later logit must be strictly greater to win).
pub fn greedy(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate().skip(1) {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// The `n` highest logits as `(id, logit)`, highest first, lower id first
/// among equals (NaN logits are skipped).
pub fn top_n(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
    if n == 0 {
        return best;
    }
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() || (best.len() == n && best.last().is_some_and(|&(_, m)| l <= m)) {
            continue;
        }
        let at = best.partition_point(|&(_, m)| m >= l);
        best.insert(at, (i as u32, l));
        best.truncate(n);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(greedy(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(greedy(&[5.0]), 0);
        assert_eq!(greedy(&[-1.0, -1.0]), 0);
    }

    #[test]
    fn penalty_divides_positive_and_multiplies_negative() {
        assert_eq!(penalized(2.0, 2.0), 1.0);
        assert_eq!(penalized(-2.0, 2.0), -4.0);
        assert_eq!(penalized(0.0, 2.0), 0.0);
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 4.0,
            repeat_last_n: 2,
            ..SamplerConfig::greedy()
        })
        .unwrap();
        let logits = [3.0, 2.0, 1.0];
        assert_eq!(s.sample(&logits), 0);
        s.accept(0);
        // 3 / 4 < 2: token 1 wins now.
        assert_eq!(s.sample(&logits), 1);
        s.accept(1);
        s.accept(2);
        // The window holds the last two (1, 2): token 0 is free again.
        assert_eq!(s.sample(&logits), 0);
    }

    #[test]
    fn presence_penalty_alone_moves_greedy() {
        let mut s = Sampler::new(SamplerConfig {
            presence_penalty: 1.5,
            ..SamplerConfig::greedy()
        })
        .unwrap();
        s.accept(0);
        assert_eq!(s.sample(&[3.0, 2.0]), 1);
    }

    #[test]
    fn trace_reports_the_stages_that_run_in_chain_order() {
        let mut s = Sampler::new(SamplerConfig {
            typical_p: 0.9,
            presence_penalty: 0.1,
            ..SamplerConfig::default()
        })
        .unwrap();
        s.accept(3);
        let logits: Vec<f32> = (0..100).map(|i| (i % 17) as f32 * 0.3).collect();
        let mut seen = Vec::new();
        let t = s.sample_traced(&logits, |stage, c| seen.push((stage, c.len())));
        let stages: Vec<Stage> = seen.iter().map(|x| x.0).collect();
        assert_eq!(
            stages,
            [
                Stage::Penalties,
                Stage::TopK,
                Stage::Typical,
                Stage::TopP,
                Stage::MinP,
                Stage::Temperature
            ]
        );
        assert_eq!(seen[1].1, 40);
        assert!(seen.windows(2).all(|w| w[1].1 <= w[0].1));
        assert!((t as usize) < logits.len());
    }

    #[test]
    fn top_n_orders_by_logit_then_id() {
        let v = top_n(&[1.0, 5.0, 3.0, 5.0, -2.0], 3);
        assert_eq!(v, [(1, 5.0), (3, 5.0), (2, 3.0)]);
        assert_eq!(top_n(&[1.0], 5), [(0, 1.0)]);
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        let bad = |cfg: SamplerConfig| Sampler::new(cfg).unwrap_err().to_string();
        let d = SamplerConfig::default;
        assert_eq!(
            bad(SamplerConfig { temp: -1.0, ..d() }),
            "invalid --temp -1: must be a number >= 0 (0: greedy)"
        );
        assert!(bad(SamplerConfig { top_p: 2.0, ..d() }).contains("--top-p 2"));
        assert!(bad(SamplerConfig {
            typical_p: -0.5,
            ..d()
        })
        .contains("--typical -0.5"));
        assert!(bad(SamplerConfig {
            min_p: f32::NAN,
            ..d()
        })
        .contains("--min-p NaN"));
        assert!(bad(SamplerConfig {
            repeat_penalty: 0.0,
            ..d()
        })
        .contains("--repeat-penalty"));
        assert!(bad(SamplerConfig {
            presence_penalty: f32::INFINITY,
            ..d()
        })
        .contains("--presence-penalty"));
        assert!(Sampler::new(d()).is_ok());
    }
}
