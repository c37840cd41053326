//! Properties of the sampler: greedy is the argmax with llama.cpp's tie
//! rule, top-k = 1 is greedy at any temperature, a seed fixes the tokens,
//! every sampled token survives the filters, the repetition penalty is
//! llama.cpp's, and draws follow the softmax of `logits / temp`.

use proptest::prelude::*;

use engine::sampler::{greedy, penalized, Sampler, SamplerConfig};

/// Logits drawn from a few values, so that ties are common.
fn tied_logits() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec((-3i32..4).prop_map(|v| v as f32 * 0.5), 1..60)
}

fn any_logits() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-20.0f32..20.0, 1..300)
}

fn config() -> impl Strategy<Value = SamplerConfig> {
    (
        0.05f32..3.0,
        0usize..50,
        0.0f32..=1.0,
        0.0f32..=1.0,
        any::<u32>(),
    )
        .prop_map(|(temp, top_k, top_p, min_p, seed)| SamplerConfig {
            temp,
            top_k,
            top_p,
            min_p,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed,
            ..SamplerConfig::default()
        })
}

/// The first index holding the largest value.
fn first_max(v: &[f32]) -> u32 {
    let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    v.iter().position(|&x| x == m).unwrap() as u32
}

/// Softmax in f64.
fn softmax(v: &[f32], temp: f64) -> Vec<f64> {
    let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = v.iter().map(|&x| ((x as f64 - m) / temp).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn greedy_is_the_first_argmax(logits in tied_logits()) {
        let want = first_max(&logits);
        prop_assert_eq!(greedy(&logits), want);
        let mut s = Sampler::new(SamplerConfig::greedy()).unwrap();
        prop_assert_eq!(s.sample(&logits), want);
    }

    #[test]
    fn top_k_one_is_greedy(logits in tied_logits(), cfg in config()) {
        let mut s = Sampler::new(SamplerConfig { top_k: 1, ..cfg }).unwrap();
        prop_assert_eq!(s.sample(&logits), first_max(&logits));
    }

    #[test]
    fn a_seed_fixes_the_tokens(logits in any_logits(), cfg in config(), steps in 1usize..20) {
        let run = || {
            let mut s = Sampler::new(cfg.clone()).unwrap();
            let mut logits = logits.clone();
            let n = logits.len();
            (0..steps)
                .map(|i| {
                    let t = s.sample(&logits);
                    s.accept(t);
                    // Vary the logits between steps as a model would.
                    logits[i % n] += 1.0;
                    t
                })
                .collect::<Vec<u32>>()
        };
        prop_assert_eq!(run(), run());
    }

    #[test]
    fn sampled_tokens_pass_every_filter(logits in any_logits(), cfg in config()) {
        let mut s = Sampler::new(cfg.clone()).unwrap();
        let t = s.sample(&logits);
        let l = logits[t as usize];
        // Rank: tokens before it in the sorted order (higher logit, or equal
        // and a lower id).
        let rank = logits
            .iter()
            .enumerate()
            .filter(|&(i, &x)| x > l || (x == l && (i as u32) < t))
            .count();
        if cfg.top_k > 0 {
            prop_assert!(rank < cfg.top_k, "rank {} with top-k {}", rank, cfg.top_k);
        }
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if cfg.min_p > 0.0 {
            prop_assert!(l >= max + cfg.min_p.ln() - 1e-4, "logit {} below min-p floor", l);
        }
        if cfg.top_p < 1.0 {
            // The probability mass ranked before it (over the top-k
            // candidates) stays below p.
            let mut order: Vec<usize> = (0..logits.len()).collect();
            order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
            let keep = if cfg.top_k > 0 { cfg.top_k.min(order.len()) } else { order.len() };
            let kept: Vec<f32> = order[..keep].iter().map(|&i| logits[i]).collect();
            let p = softmax(&kept, 1.0);
            let before: f64 = p[..rank].iter().sum();
            prop_assert!(before < f64::from(cfg.top_p) + 1e-5, "mass before {} >= top-p {}", before, cfg.top_p);
        }
    }

    #[test]
    fn penalty_divides_positive_and_multiplies_negative(
        logits in tied_logits(), seen in prop::collection::vec(0u32..60, 0..10),
        penalty in 0.2f32..4.0, window in 0usize..6,
    ) {
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: penalty,
            repeat_last_n: window,
            ..SamplerConfig::greedy()
        }).unwrap();
        for &t in &seen {
            s.accept(t);
        }
        let recent = &seen[seen.len().saturating_sub(window)..];
        let want: Vec<f32> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                let hit = recent.contains(&(i as u32));
                let p = if l > 0.0 { l / penalty } else { l * penalty };
                prop_assert_eq!(penalized(l, penalty), p);
                Ok(if hit { p } else { l })
            })
            .collect::<Result<_, TestCaseError>>()?;
        prop_assert_eq!(s.sample(&logits), first_max(&want));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Frequencies over many draws match `softmax(logits / temp)`: each
    /// within 5 standard deviations of its binomial count.
    #[test]
    fn draws_follow_the_softmax(
        logits in prop::collection::vec(-3.0f32..3.0, 2..8),
        temp in 0.3f32..2.0,
        seed: u32,
    ) {
        const N: usize = 20_000;
        let mut s = Sampler::new(SamplerConfig {
            temp,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 0,
            seed,
            ..SamplerConfig::default()
        }).unwrap();
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..N {
            counts[s.sample(&logits) as usize] += 1;
        }
        for (i, p) in softmax(&logits, f64::from(temp)).into_iter().enumerate() {
            let expect = p * N as f64;
            let sd = (N as f64 * p * (1.0 - p)).sqrt();
            let got = counts[i] as f64;
            prop_assert!((got - expect).abs() <= 5.0 * sd + 1.0,
                "token {}: {} draws, expected {:.1} (sd {:.1})", i, got, expect, sd);
        }
    }
}

#[test]
fn lower_temperature_sharpens() {
    // The share of the best token grows as the temperature falls.
    let logits = [1.0f32, 0.5, 0.0, -0.5];
    let share = |temp| {
        let mut s = Sampler::new(SamplerConfig {
            temp,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 5,
            ..SamplerConfig::default()
        })
        .unwrap();
        (0..10_000).filter(|_| s.sample(&logits) == 0).count()
    };
    let (hot, warm, cold) = (share(2.0), share(1.0), share(0.25));
    assert!(hot < warm && warm < cold, "{hot} {warm} {cold}");
}

#[test]
fn reset_restarts_the_draws() {
    let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
    let mut s = Sampler::new(SamplerConfig {
        seed: 9,
        ..SamplerConfig::default()
    })
    .unwrap();
    let a: Vec<u32> = (0..10).map(|_| s.sample(&logits)).collect();
    s.reset();
    let b: Vec<u32> = (0..10).map(|_| s.sample(&logits)).collect();
    assert_eq!(a, b);
}
