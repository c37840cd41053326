//! Every `--unfuse` name (each rule of `RULES`, and `subgroups`) through
//! whole models on the GPU kernel layout: turning it off gives the same
//! bits, and for a rule, more dispatches than with it on (so the rule ran
//! on one of the models, with the other rules on, or with the rules that
//! take its kernels in off).

use crate::model_support;
use crate::vulkan_support;

use std::sync::Arc;

use engine::model::Model;
use engine::session::{Outputs, Session, SessionConfig};
use engine::vulkan::{KernelLayout, Rule, Unfused, RULES};
use model_support::Tiny;

/// The logits of a prompt and decode steps past it, and the dispatches.
fn run(m: &Arc<Model>, n_vocab: u64, unfused: Unfused) -> (Vec<f32>, usize) {
    let mut req = vulkan_support::session::request(-1);
    req.vk.kernel_layout = Some(KernelLayout::Gpu);
    req.vk.unfused = unfused;
    let (mut s, plan) = Session::on_devices(Arc::clone(m), &req, &SessionConfig::default())
        .expect("the session opens");
    let toks: Vec<u32> = (0..9).map(|i| ((i * 7 + 3) % n_vocab) as u32).collect();
    let mut out = s.forward(&toks, Outputs::All, None).unwrap().to_vec();
    for i in 0..3u64 {
        out.extend_from_slice(s.decode(((i * 5 + 1) % n_vocab) as u32).unwrap());
    }
    let msgs = s.devices().validation_messages();
    assert!(msgs.is_empty(), "{plan}: {msgs:?}");
    (out, s.devices().dispatches())
}

fn off(rules: &[Rule]) -> Unfused {
    let mut u = Unfused::default();
    for &r in rules {
        u.set(r, true);
    }
    u
}

#[test]
fn each_unfuse_name_changes_the_kernels_run_and_not_the_bits() {
    // Heads of 32 (the output projection's epilogue takes whole blocks of
    // a head).
    let llama = Tiny {
        n_head: 2,
        n_kv_head: 1,
        head_dim: 32,
        ..Tiny::llama()
    };
    let models: Vec<(Tiny, Arc<Model>)> = [llama, Tiny::gemma3()]
        .into_iter()
        .map(|t| {
            let m = t.model();
            (t, m)
        })
        .collect();
    // Every rule on; and the fused matvecs and add-norm off (the rules
    // they take in run then: a post-norm's add, norm-add, with add-norm on
    // leaves the dispatches as they were, the add taken by the next norm).
    let bases = [Vec::new(), vec![Rule::Matvec, Rule::AddNorm]];
    let mut ran = vec![false; RULES.len()];
    for (t, m) in &models {
        for base in &bases {
            let (want, n) = run(m, t.n_vocab, off(base));
            for r in &RULES {
                let rules: Vec<Rule> = base.iter().copied().chain([r.rule]).collect();
                let (got, k) = run(m, t.n_vocab, off(&rules));
                let same = want
                    .iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same && want.len() == got.len(),
                    "{} {}: other bits",
                    t.arch,
                    r.name
                );
                assert!(
                    k >= n,
                    "{} {}: {k} dispatches, {n} with it on",
                    t.arch,
                    r.name
                );
                ran[r.rule as usize] |= k > n;
            }
        }
        let mut u = Unfused::default();
        u.subgroups = true;
        let ((want, n), (got, k)) = (run(m, t.n_vocab, Unfused::default()), run(m, t.n_vocab, u));
        assert!(
            want == got && n == k,
            "{} subgroups: other bits or dispatches",
            t.arch
        );
    }
    let never: Vec<&str> = RULES
        .iter()
        .filter(|r| !ran[r.rule as usize])
        .map(|r| r.name)
        .collect();
    assert!(never.is_empty(), "rules that never ran: {never:?}");
}
