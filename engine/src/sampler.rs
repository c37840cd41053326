//! Choosing the next token from a step's logits, as llama.cpp's default
//! sampler chain chooses it (`common/sampling.cpp`, `src/llama-sampler.cpp`).
//!
//! With `temp == 0` the choice is greedy: the highest logit after the
//! repetition penalty, the lowest id among equals (llama.cpp's greedy
//! sampler keeps the first maximum). Otherwise the samplers run in
//! llama.cpp's default order, each on the candidates the one before left:
//!
//! 1. repetition penalty: tokens among the last `repeat_last_n` accepted
//!    ones get their logit divided by `repeat_penalty` when positive,
//!    multiplied when not;
//! 2. top-k: the `top_k` highest logits, sorted (highest first; equal
//!    logits by id, where llama.cpp's sort leaves them in any order);
//! 3. top-p: softmax over the candidates, then the shortest prefix of the
//!    sorted list whose probabilities add up to at least `top_p` (sums in
//!    f32, as llama.cpp's);
//! 4. min-p: the candidates whose logit is at least the largest plus
//!    `ln(min_p)` (a probability at least `min_p` times the largest);
//! 5. temperature: logits divided by `temp`;
//! 6. dist: softmax (`exp` in f32, sum in f64) and one uniform draw `u` in
//!    `[0, 1)`: the first candidate at which the running sum reaches
//!    `u` times the total.
//!
//! The draw comes from xoshiro256** seeded by SplitMix64 from the seed
//! ([`crate::synth::rng`]), 53 bits per draw; one draw per sampled token,
//! whatever the candidates. A seed gives the same tokens on every machine
//! for the same logits (llama.cpp's own stream, `std::mt19937`, is not
//! reproduced: its draws differ, its rules are these).

use std::collections::{HashMap, VecDeque};

use crate::synth::rng::Xoshiro256StarStar;

/// One token still in the running: its id, its (adjusted) logit, and its
/// probability once a softmax has run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub id: u32,
    pub logit: f32,
    pub p: f32,
}

/// The sampling settings (llama.cpp's names and defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Temperature; 0: greedy.
    pub temp: f32,
    /// Keep the `top_k` highest logits; 0: all.
    pub top_k: usize,
    /// Nucleus: keep the smallest set with this much probability; 1: all.
    pub top_p: f32,
    /// Keep tokens at least this fraction as likely as the likeliest; 0: all.
    pub min_p: f32,
    /// Penalty of recently seen tokens; 1: none.
    pub repeat_penalty: f32,
    /// How many of the last accepted tokens the penalty looks at; 0: none.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// llama.cpp's defaults (`common_params_sampling`), seed 0.
    fn default() -> SamplerConfig {
        SamplerConfig {
            temp: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
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
        Ok(())
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

/// A sampler: the settings, the draw generator and the penalty window.
pub struct Sampler {
    cfg: SamplerConfig,
    rng: Xoshiro256StarStar,
    /// The last `repeat_last_n` accepted tokens, oldest first.
    recent: VecDeque<u32>,
    /// How often each token occurs in `recent`.
    counts: HashMap<u32, u32>,
    /// Scratch: the candidates of one step, and a copy of its logits.
    cands: Vec<Candidate>,
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
            rng: Xoshiro256StarStar::seed_from(cfg.seed),
            cfg,
            recent: VecDeque::new(),
            counts: HashMap::new(),
            cands: Vec::new(),
            logits: Vec::new(),
        })
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Forgets the accepted tokens and restarts the draws from the seed.
    pub fn reset(&mut self) {
        self.rng = Xoshiro256StarStar::seed_from(self.cfg.seed);
        self.recent.clear();
        self.counts.clear();
    }

    /// Remembers a token of the sequence for the repetition penalty
    /// (llama.cpp accepts the prompt's tokens and each sampled one).
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
        assert!(!logits.is_empty(), "sample: no logits");
        let penalize = self.cfg.repeat_penalty != 1.0 && !self.counts.is_empty();
        if self.cfg.temp == 0.0 {
            if !penalize {
                return greedy(logits);
            }
            self.logits.clear();
            self.logits.extend_from_slice(logits);
            apply_penalty(&mut self.logits, &self.counts, self.cfg.repeat_penalty);
            return greedy(&self.logits);
        }
        let u = self.uniform();
        let cands = &mut self.cands;
        cands.clear();
        cands.extend(logits.iter().enumerate().map(|(i, &logit)| Candidate {
            id: i as u32,
            logit,
            p: 0.0,
        }));
        if penalize {
            for c in cands.iter_mut() {
                if self.counts.contains_key(&c.id) {
                    c.logit = penalized(c.logit, self.cfg.repeat_penalty);
                }
            }
        }
        let mut sorted = false;
        if self.cfg.top_k > 0 {
            top_k(cands, self.cfg.top_k);
            sorted = true;
        }
        if self.cfg.top_p < 1.0 {
            top_p(cands, self.cfg.top_p, sorted);
        }
        if self.cfg.min_p > 0.0 {
            min_p(cands, self.cfg.min_p);
        }
        temperature(cands, self.cfg.temp);
        let i = dist(cands, u);
        cands[i].id
    }

    /// A uniform draw in `[0, 1)` with 53 random bits.
    fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
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

/// A logit under the repetition penalty: divided when positive,
/// multiplied when not (llama.cpp's rule, so that a penalty always makes a
/// token less likely).
pub fn penalized(logit: f32, penalty: f32) -> f32 {
    if logit <= 0.0 {
        logit * penalty
    } else {
        logit / penalty
    }
}

/// [`penalized`] applied to the logit of every token in `counts`.
pub fn apply_penalty(logits: &mut [f32], counts: &HashMap<u32, u32>, penalty: f32) {
    for &id in counts.keys() {
        if let Some(l) = logits.get_mut(id as usize) {
            *l = penalized(*l, penalty);
        }
    }
}

/// Highest logit first, lower id first among equals.
fn by_logit(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Keeps the `k` best candidates (`k > 0`), sorted.
pub fn top_k(cands: &mut Vec<Candidate>, k: usize) {
    let k = k.min(cands.len());
    if k == 0 {
        return;
    }
    if k < cands.len() {
        cands.select_nth_unstable_by(k - 1, by_logit);
        cands.truncate(k);
    }
    cands.sort_unstable_by(by_logit);
}

/// Sets each candidate's `p` to its softmax probability, computed as
/// llama.cpp's `llama_sampler_softmax_impl` does: `exp` of the logit minus
/// the largest, in f32, divided by their f32 sum.
pub fn softmax(cands: &mut [Candidate]) {
    let max = cands
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for c in cands.iter_mut() {
        c.p = (c.logit - max).exp();
        sum += c.p;
    }
    for c in cands.iter_mut() {
        c.p /= sum;
    }
}

/// Keeps the shortest prefix of the sorted candidates whose probabilities
/// reach `p` (all of them when rounding keeps the sum below `p`).
/// `sorted`: the candidates are already highest first.
pub fn top_p(cands: &mut Vec<Candidate>, p: f32, sorted: bool) {
    if cands.is_empty() {
        return;
    }
    softmax(cands);
    if !sorted {
        cands.sort_unstable_by(by_logit);
    }
    let mut cum = 0.0f32;
    for i in 0..cands.len() {
        cum += cands[i].p;
        if cum >= p {
            cands.truncate(i + 1);
            return;
        }
    }
}

/// Keeps the candidates whose logit is at least the largest plus `ln(p)`,
/// in their order.
pub fn min_p(cands: &mut Vec<Candidate>, p: f32) {
    let max = cands
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    let floor = max + p.ln();
    // Only NaN logits can leave nothing: then the candidates stay as they are.
    if cands.iter().any(|c| c.logit >= floor) {
        cands.retain(|c| c.logit >= floor);
    }
}

/// Divides every logit by `temp` (`> 0`).
pub fn temperature(cands: &mut [Candidate], temp: f32) {
    for c in cands.iter_mut() {
        c.logit /= temp;
    }
}

/// The index of the candidate that draw `u` (in `[0, 1)`) picks, as
/// llama.cpp's dist sampler: `exp(logit - max)` in f32 (also stored as
/// `p`, normalised), running sum in f64, the first index where it reaches
/// `u` times the total; the last when rounding never gets there.
///
/// # Panics
/// On no candidates.
pub fn dist(cands: &mut [Candidate], u: f64) -> usize {
    assert!(!cands.is_empty(), "dist: no candidates");
    if cands.len() == 1 {
        cands[0].p = 1.0;
        return 0;
    }
    let max = cands
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    let mut total = 0.0f64;
    for c in cands.iter_mut() {
        c.p = (c.logit - max).exp();
        total += f64::from(c.p);
    }
    let target = total * u;
    let mut run = 0.0f64;
    let mut chosen = None;
    for (i, c) in cands.iter_mut().enumerate() {
        if chosen.is_none() {
            run += f64::from(c.p);
            if run >= target {
                chosen = Some(i);
            }
        }
        c.p = (f64::from(c.p) / total) as f32;
    }
    chosen.unwrap_or(cands.len() - 1)
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

    fn cands(logits: &[f32]) -> Vec<Candidate> {
        logits
            .iter()
            .enumerate()
            .map(|(i, &logit)| Candidate {
                id: i as u32,
                logit,
                p: 0.0,
            })
            .collect()
    }

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
    fn top_k_keeps_the_best_sorted_and_breaks_ties_by_id() {
        let mut c = cands(&[0.5, 2.0, 1.0, 2.0, -1.0]);
        top_k(&mut c, 3);
        let ids: Vec<u32> = c.iter().map(|c| c.id).collect();
        assert_eq!(ids, [1, 3, 2]);
        let mut c = cands(&[0.5, 2.0]);
        top_k(&mut c, 10);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].id, 1);
    }

    #[test]
    fn top_p_keeps_the_shortest_prefix_reaching_p() {
        // Probabilities 0.5, 0.3, 0.2 (logits are their logarithms).
        let l = [0.3f32.ln(), 0.5f32.ln(), 0.2f32.ln()];
        let mut c = cands(&l);
        top_p(&mut c, 0.7, false);
        let ids: Vec<u32> = c.iter().map(|c| c.id).collect();
        assert_eq!(ids, [1, 0]);
        let mut c = cands(&l);
        top_p(&mut c, 0.5, false);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn min_p_keeps_tokens_near_the_best() {
        let l = [0.3f32.ln(), 0.5f32.ln(), 0.04f32.ln()];
        let mut c = cands(&l);
        min_p(&mut c, 0.1);
        let ids: Vec<u32> = c.iter().map(|c| c.id).collect();
        assert_eq!(ids, [0, 1]);
    }

    #[test]
    fn dist_follows_the_running_sum() {
        let l = [0.5f32.ln(), 0.25f32.ln(), 0.25f32.ln()];
        assert_eq!(dist(&mut cands(&l), 0.0), 0);
        assert_eq!(dist(&mut cands(&l), 0.49), 0);
        assert_eq!(dist(&mut cands(&l), 0.51), 1);
        assert_eq!(dist(&mut cands(&l), 0.99), 2);
        let mut c = cands(&l);
        dist(&mut c, 0.3);
        assert!((c[0].p - 0.5).abs() < 1e-6);
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
            min_p: f32::NAN,
            ..d()
        })
        .contains("--min-p NaN"));
        assert!(bad(SamplerConfig {
            repeat_penalty: 0.0,
            ..d()
        })
        .contains("--repeat-penalty"));
        assert!(Sampler::new(d()).is_ok());
    }
}
