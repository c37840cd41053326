//! The stages of the sampler chain, each as llama.cpp's
//! (`src/llama-sampler.cpp`) transforms its candidate array: the same
//! arithmetic (f32 where it uses f32, `expf` / `logf` from the same libm,
//! `std::max`'s NaN behaviour), the same comparisons, and the same order
//! of the candidates after each stage, which the dist draw walks. Its sorts
//! are not stable, so that order among equal logits is its algorithms':
//! these run the same ones ([`crate::stdsort`]: libstdc++'s `std::sort` and
//! `std::partial_sort`, and llama.cpp's 128-bucket partial sort), so ties
//! resolve as in llama.cpp built with GCC.

use std::cmp::Ordering;
use std::collections::HashMap;

/// One token still in the running: its id, its (adjusted) logit, and its
/// probability once a softmax has run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub id: u32,
    pub logit: f32,
    pub p: f32,
}

/// The candidates between stages, and whether they are sorted by logit
/// (highest first), as llama.cpp's `llama_token_data_array::sorted`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Candidates {
    pub items: Vec<Candidate>,
    pub sorted: bool,
}

impl Candidates {
    /// Every token of `logits`, in id order, unsorted.
    pub fn from_logits(logits: &[f32]) -> Candidates {
        let mut c = Candidates::default();
        c.reset(logits);
        c
    }

    /// Refills with every token of `logits`, in id order, unsorted.
    pub fn reset(&mut self, logits: &[f32]) {
        self.items.clear();
        self.items
            .extend(logits.iter().enumerate().map(|(i, &logit)| Candidate {
                id: i as u32,
                logit,
                p: 0.0,
            }));
        self.sorted = false;
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The ids, in the candidates' order.
    pub fn ids(&self) -> Vec<u32> {
        self.items.iter().map(|c| c.id).collect()
    }
}

/// llama.cpp's comparison of candidates: `a.logit > b.logit`.
fn higher(a: &Candidate, b: &Candidate) -> bool {
    a.logit > b.logit
}

/// `std::max(a, b)`: `a < b ? b : a` (a NaN `a` stays).
fn cmax(a: f32, b: f32) -> f32 {
    if a < b {
        b
    } else {
        a
    }
}

/// C++'s `int(x)` on x86-64 (`cvttss2si`): truncation, and `INT_MIN` for
/// NaN and anything out of range.
fn c_int(x: f32) -> i32 {
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// llama.cpp's `llama_token_data_array_partial_sort`: the candidates in
/// 128 buckets of their logit over [−10, 10] (clamped), the highest
/// buckets that hold `npartial` taken, each sorted with `std::sort` but the
/// last, which gets `std::partial_sort` of what is still missing. Returns
/// every candidate of those buckets (at least `npartial`), the first
/// `npartial` sorted.
pub fn bucket_partial_sort(items: &[Candidate], npartial: usize) -> Vec<Candidate> {
    const NBUCKETS: usize = 128;
    const LOW: f32 = -10.0;
    const HIGH: f32 = 10.0;
    let scale = NBUCKETS as f32 / (HIGH - LOW);
    let inter = -LOW * scale;
    let mut histo = [0usize; NBUCKETS];
    let idx: Vec<usize> = items
        .iter()
        .map(|c| {
            let ib = c_int(scale * c.logit + inter).clamp(0, NBUCKETS as i32 - 1) as usize;
            histo[ib] += 1;
            ib
        })
        .collect();
    let mut nhave = 0;
    let mut ib = NBUCKETS as isize - 1;
    while ib >= 0 {
        nhave += histo[ib as usize];
        if nhave >= npartial {
            break;
        }
        ib -= 1;
    }
    let ib = ib.max(0) as usize;
    // Start of each bucket's run in `res`, highest bucket first.
    let mut start = [0usize; NBUCKETS];
    let mut at = 0;
    for j in (ib..NBUCKETS).rev() {
        start[j] = at;
        at += histo[j];
    }
    let mut res = vec![
        items.first().copied().unwrap_or(Candidate {
            id: 0,
            logit: 0.0,
            p: 0.0
        });
        nhave
    ];
    for (c, &j) in items.iter().zip(&idx) {
        if j >= ib {
            res[start[j]] = *c;
            start[j] += 1;
        }
    }
    let mut at = 0;
    let mut done = 0;
    for j in (ib + 1..NBUCKETS).rev() {
        crate::stdsort::sort(&mut res[at..at + histo[j]], higher);
        at += histo[j];
        done += histo[j];
    }
    let rest = npartial.saturating_sub(done);
    crate::stdsort::partial_sort(&mut res[at..at + histo[ib]], rest, higher);
    res
}

/// llama.cpp's `llama_token_data_array_partial_sort_inplace`: the
/// `npartial` highest, sorted (`std::partial_sort` up to 128, else the
/// bucket sort); the rest dropped.
fn partial_sort_inplace(c: &mut Candidates, npartial: usize) {
    if npartial <= 128 {
        crate::stdsort::partial_sort(&mut c.items, npartial, higher);
        c.items.truncate(npartial);
    } else {
        let tmp = bucket_partial_sort(&c.items, npartial);
        c.items.clear();
        c.items.extend_from_slice(&tmp[..npartial]);
    }
    c.sorted = true;
}

/// Highest logit first, lower id first among equals.
pub fn by_logit(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
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

/// The penalties of tokens seen `count` times in the window: the
/// repetition penalty ([`penalized`]), then `count · freq + present`
/// subtracted (in f32, as llama.cpp's `llama_sampler_penalties`). Leaves
/// the candidates unsorted.
pub fn penalties(
    c: &mut Candidates,
    counts: &HashMap<u32, u32>,
    repeat: f32,
    freq: f32,
    present: f32,
) {
    for cand in c.items.iter_mut() {
        let Some(&count) = counts.get(&cand.id) else {
            continue;
        };
        cand.logit = penalized(cand.logit, repeat);
        cand.logit -= count as f32 * freq + f32::from(u8::from(count > 0)) * present;
    }
    c.sorted = false;
}

/// Keeps the `k` best candidates, sorted; `k == 0` leaves them as they are
/// (llama.cpp's top-k of `k <= 0` is a no-op, unsorted).
pub fn top_k(c: &mut Candidates, k: usize) {
    if k == 0 {
        return;
    }
    let k = k.min(c.len());
    if !c.sorted {
        partial_sort_inplace(c, k);
    }
    c.items.truncate(k);
}

/// Sets each candidate's `p` to its softmax probability as llama.cpp's
/// `llama_sampler_softmax_impl` does: with `sort`, sorted first; the
/// largest logit (the first when sorted), `expf(logit − max)` in f32,
/// divided by their f32 sum taken in the candidates' order.
pub fn softmax(c: &mut Candidates, sort: bool) {
    if c.is_empty() {
        return;
    }
    if sort && !c.sorted {
        let n = c.len();
        partial_sort_inplace(c, n);
    }
    let mut max = c.items[0].logit;
    if !c.sorted {
        for x in &c.items[1..] {
            max = cmax(max, x.logit);
        }
    }
    let mut sum = 0.0f32;
    for x in c.items.iter_mut() {
        x.p = (x.logit - max).exp();
        sum += x.p;
    }
    for x in c.items.iter_mut() {
        x.p /= sum;
    }
}

/// Locally typical sampling (`p < 1`): softmax (sorted), the entropy
/// `H = Σ −p ln p` (f32; a probability of 0 makes it NaN, as in
/// llama.cpp), then the candidates in increasing order of `|−ln p − H|`
/// (`std::sort` of their indices) while the f32 sum of their `p` is at
/// most `p`, and the one that makes it exceed `p`. Leaves them in that
/// order, unsorted.
pub fn typical(c: &mut Candidates, p: f32) {
    if p >= 1.0 || c.is_empty() {
        return;
    }
    softmax(c, true);
    let mut entropy = 0.0f32;
    for x in &c.items {
        entropy += -x.p * x.p.ln();
    }
    let shifted: Vec<f32> = c
        .items
        .iter()
        .map(|x| (-x.p.ln() - entropy).abs())
        .collect();
    let mut order: Vec<usize> = (0..c.len()).collect();
    crate::stdsort::sort(&mut order, |&a, &b| shifted[a] < shifted[b]);
    let mut cum = 0.0f32;
    let mut last = order.len();
    for (i, &idx) in order.iter().enumerate() {
        cum += c.items[idx].p;
        if cum > p {
            last = i + 1;
            break;
        }
    }
    let kept: Vec<Candidate> = order[..last].iter().map(|&i| c.items[i]).collect();
    c.items = kept;
    c.sorted = false;
}

/// Nucleus sampling (`p < 1`), as llama.cpp's `llama_sampler_top_p_apply`:
/// softmax in the candidates' order, then the running f32 sum of the
/// probabilities in sorted order up to the first that reaches `p`. An
/// unsorted array of more than 1024 candidates is sorted by the bucket
/// sort, its 256 best first and all of it if those do not reach `p`.
/// Leaves the kept ones sorted.
pub fn top_p(c: &mut Candidates, p: f32) {
    if p >= 1.0 || c.is_empty() {
        return;
    }
    softmax(c, false);
    let size = c.len();
    let mut k = size;
    let mut buf: Option<Vec<Candidate>> = None;
    if !c.sorted && size > 1024 {
        k = 256.min(size);
        buf = Some(bucket_partial_sort(&c.items, k));
    } else if !c.sorted {
        partial_sort_inplace(c, k);
    }
    let mut cum = 0.0f32;
    let mut last = size;
    for i in 0..size {
        let pdata = buf.as_deref().unwrap_or(&c.items);
        cum += pdata[i].p;
        if cum >= p {
            // Fault switch point "sampler-top-p": the candidate that
            // reaches p is left out.
            last = if crate::fault::active("sampler-top-p") {
                i.max(1)
            } else {
                i + 1
            };
            break;
        }
        if !c.sorted && i == k - 1 {
            k = size;
            buf = Some(bucket_partial_sort(&c.items, k));
        }
    }
    if !c.sorted {
        let b = buf.expect("an unsorted array went through the bucket sort");
        c.items.clear();
        c.items.extend_from_slice(&b[..last]);
        c.sorted = true;
    }
    c.items.truncate(last);
}

/// Min-p (`p > 0`), as llama.cpp's `llama_sampler_min_p_apply`: unsorted,
/// the candidates whose logit is at least the largest plus `logf(p)`, in
/// their order (when any); sorted (or when none passed), sorted first,
/// then the prefix up to the first below that floor (the first always
/// kept).
pub fn min_p(c: &mut Candidates, p: f32) {
    if p <= 0.0 || c.is_empty() {
        return;
    }
    if !c.sorted {
        let max = c.items.iter().fold(f32::MIN, |m, x| cmax(m, x.logit));
        let floor = max + p.ln();
        let kept: Vec<Candidate> = c
            .items
            .iter()
            .filter(|x| x.logit >= floor)
            .copied()
            .collect();
        if !kept.is_empty() {
            c.items = kept;
            return;
        }
        let n = c.len();
        partial_sort_inplace(c, n);
    }
    let floor = c.items[0].logit + p.ln();
    let mut i = 1;
    // `!(x < floor)`, not `x >= floor`: a NaN logit is kept, as in C++.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    while i < c.len() && !(c.items[i].logit < floor) {
        i += 1;
    }
    c.items.truncate(i);
}

/// Divides every logit by `temp` (`> 0`).
pub fn temperature(c: &mut Candidates, temp: f32) {
    for x in c.items.iter_mut() {
        x.logit /= temp;
    }
}

/// The index of the candidate that draw `u` (in `[0, 1)`) picks, as
/// llama.cpp's dist sampler: the largest logit (the first when sorted),
/// `expf(logit − max)` (also stored as `p`, normalised), running sum in
/// f64, the first index where it reaches `u` times the total; the last
/// when rounding never gets there.
///
/// # Panics
/// On no candidates.
pub fn dist(c: &mut Candidates, u: f64) -> usize {
    assert!(!c.is_empty(), "dist: no candidates");
    if c.len() == 1 {
        c.items[0].p = 1.0;
        return 0;
    }
    let mut max = c.items[0].logit;
    if !c.sorted {
        for x in &c.items[1..] {
            max = cmax(max, x.logit);
        }
    }
    let mut total = 0.0f64;
    for x in c.items.iter_mut() {
        x.p = (x.logit - max).exp();
        total += f64::from(x.p);
    }
    let target = total * u;
    let mut run = 0.0f64;
    let mut chosen = None;
    for (i, x) in c.items.iter_mut().enumerate() {
        if chosen.is_none() {
            run += f64::from(x.p);
            if run >= target {
                chosen = Some(i);
            }
        }
        x.p = (f64::from(x.p) / total) as f32;
    }
    chosen.unwrap_or(c.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(logits: &[f32]) -> Candidates {
        Candidates::from_logits(logits)
    }

    #[test]
    fn top_k_keeps_the_best_sorted_with_ties_as_libstdc_plus_plus() {
        // g++ 12.2's std::partial_sort with `a.logit > b.logit` on these
        // five keeps 3 1 2: the tie between 1 and 3 in its heap order.
        let mut c = cands(&[0.5, 2.0, 1.0, 2.0, -1.0]);
        top_k(&mut c, 3);
        assert_eq!(c.ids(), [3, 1, 2]);
        assert!(c.sorted);
        let mut c = cands(&[0.5, 2.0]);
        top_k(&mut c, 10);
        assert_eq!(c.ids(), [1, 0]);
        // 0: no-op, unsorted.
        let mut c = cands(&[0.5, 2.0]);
        top_k(&mut c, 0);
        assert_eq!(c.ids(), [0, 1]);
        assert!(!c.sorted);
    }

    #[test]
    fn top_p_keeps_the_shortest_prefix_reaching_p() {
        // Probabilities 0.5, 0.3, 0.2 (logits are their logarithms).
        let l = [0.3f32.ln(), 0.5f32.ln(), 0.2f32.ln()];
        let mut c = cands(&l);
        top_p(&mut c, 0.7);
        assert_eq!(c.ids(), [1, 0]);
        let mut c = cands(&l);
        top_p(&mut c, 0.5);
        assert_eq!(c.ids(), [1]);
    }

    #[test]
    fn min_p_keeps_tokens_near_the_best_in_their_order() {
        let l = [0.3f32.ln(), 0.5f32.ln(), 0.04f32.ln()];
        let mut c = cands(&l);
        min_p(&mut c, 0.1);
        assert_eq!(c.ids(), [0, 1]);
        assert!(!c.sorted);
    }

    #[test]
    fn typical_keeps_the_tokens_nearest_the_entropy_first() {
        // p = 0.5, 0.3, 0.15, 0.05: H = 1.1434 nats; |−ln p − H| =
        // 0.450 (0.5), 0.061 (0.3), 0.754 (0.15), 1.852 (0.05).
        let l = [0.15f32.ln(), 0.5f32.ln(), 0.05f32.ln(), 0.3f32.ln()];
        let mut c = cands(&l);
        typical(&mut c, 0.7);
        // 0.3 (sum 0.3), 0.5 (0.8 > 0.7): stop.
        assert_eq!(c.ids(), [3, 1]);
        assert!(!c.sorted);
        let mut c = cands(&l);
        typical(&mut c, 0.2);
        assert_eq!(c.ids(), [3]);
    }

    #[test]
    fn penalties_apply_repeat_then_frequency_and_presence() {
        let mut c = cands(&[2.0, -1.0, 3.0]);
        let counts = HashMap::from([(0, 2), (1, 1)]);
        penalties(&mut c, &counts, 2.0, 0.5, 0.25);
        let l: Vec<f32> = c.items.iter().map(|x| x.logit).collect();
        // 2/2 − 2·0.5 − 0.25; −1·2 − 0.5 − 0.25; untouched.
        assert_eq!(l, [-0.25, -2.75, 3.0]);
    }

    #[test]
    fn dist_follows_the_running_sum() {
        let l = [0.5f32.ln(), 0.25f32.ln(), 0.25f32.ln()];
        let pick = |u| dist(&mut cands(&l), u);
        assert_eq!(pick(0.0), 0);
        assert_eq!(pick(0.49), 0);
        assert_eq!(pick(0.51), 1);
        assert_eq!(pick(0.99), 2);
        let mut c = cands(&l);
        dist(&mut c, 0.3);
        assert!((c.items[0].p - 0.5).abs() < 1e-6);
    }
}
