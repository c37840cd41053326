//! `engine::perplexity` on tiny synthetic models: logits from a position on
//! are the tail of all logits, a chunk's first token becomes BOS, a base
//! file written by one run reads back and scores the same model at almost
//! no divergence, and a model of another vocabulary is refused.

use crate::model_support;

use std::sync::Arc;

use engine::model::Model;
use engine::perplexity::{
    chunk_logits, kl_divergence, perplexity, ChunkPlan, KldSummary, LogitsReader, LogitsWriter,
    PerplexityError,
};
use engine::session::{Outputs, Session, SessionConfig};
use model_support::Tiny;

fn tokens(n: usize, vocab: u64) -> Vec<u32> {
    (0..n)
        .map(|i| ((i * 11 + 5) as u64 % vocab) as u32)
        .collect()
}

fn session(m: &Arc<Model>, n_batch: usize) -> Session {
    let cfg = SessionConfig {
        n_ctx: 32,
        n_batch,
        ..SessionConfig::default()
    };
    Session::new(Arc::clone(m), &cfg).unwrap()
}

#[test]
fn logits_from_a_position_are_the_tail_of_all_logits() {
    for t in [Tiny::llama(), Tiny::gemma3()] {
        let m = t.model();
        let v = t.n_vocab as usize;
        let toks = tokens(10, t.n_vocab);
        // Batches of 3: the first output row falls inside a batch, at its
        // start, and in the last one.
        let mut s = session(&m, 3);
        let all = s.forward(&toks, Outputs::All, None).unwrap().to_vec();
        for k in [0, 1, 3, 4, 9] {
            s.reset();
            let tail = s.forward(&toks, Outputs::From(k), None).unwrap();
            assert_eq!(tail, &all[k * v..], "{} from {k}", t.arch);
        }
        s.reset();
        assert!(s.forward(&toks, Outputs::From(10), None).is_err());
    }
}

#[test]
fn a_chunk_starts_with_bos_when_asked() {
    let t = Tiny::llama();
    let m = t.model();
    let toks = tokens(8, t.n_vocab);
    let mut s = session(&m, 512);
    let with_bos = chunk_logits(&mut s, &toks, 4, Some(1)).unwrap().to_vec();
    let mut replaced = toks.clone();
    replaced[0] = 1;
    s.reset();
    let direct = s.forward(&replaced, Outputs::From(4), None).unwrap();
    assert_eq!(with_bos, direct);
    let without = chunk_logits(&mut s, &toks, 4, None).unwrap();
    assert_ne!(with_bos, without, "token {} was replaced", toks[0]);
}

#[test]
fn a_base_written_by_one_run_scores_the_same_model_at_almost_no_divergence() {
    let t = Tiny::llama();
    let m = t.model();
    let text = tokens(45, t.n_vocab);
    // 45 tokens, n_ctx 8: 5 chunks of 3 scored positions.
    let plan = ChunkPlan::new(text.len(), 8, None).unwrap();
    assert_eq!((plan.n_chunk, plan.first(), plan.scored()), (5, 4, 3));
    assert!(ChunkPlan::new(15, 8, None).is_err(), "fewer than 2 n_ctx");
    let mut s = session(&m, 512);

    let mut chunks_seen = Vec::new();
    let plain = perplexity::<Vec<u8>, _>(&mut s, &text, &plan, None, None, |c, _| {
        chunks_seen.push(c);
        Ok(())
    })
    .unwrap();
    assert_eq!(chunks_seen, [0, 1, 2, 3, 4]);
    assert_eq!(plain.count, 15);

    let mut w = LogitsWriter::new(Vec::new(), 8, t.n_vocab as usize, &text[..40]).unwrap();
    let written = perplexity(&mut s, &text, &plan, None, Some(&mut w), |_, _| Ok(())).unwrap();
    let file = w.finish().unwrap();
    assert_eq!(written.count, 15);
    assert!((written.ppl() - plain.ppl()).abs() < 1e-5 * plain.ppl());
    assert_eq!(
        file.len() as u64,
        w_header_len(8, t.n_vocab as usize, 5),
        "file length"
    );

    let mut r = LogitsReader::new(&file[..], file.len() as u64).unwrap();
    assert_eq!(r.tokens(), &text[..40]);
    let run = kl_divergence(&mut s, &mut r, None, None, |_, _| Ok(())).unwrap();
    assert_eq!(run.positions.len(), 15);
    assert_eq!(run.sums.count, 15);
    assert_eq!(run.sums.n_same_top, 15);
    // The stored rows round each log-prob by at most half a step
    // (16/65535/2 ≈ 1.2e-4 nats), and the KLD of a distribution against
    // itself so rounded is Σ p_i e_i, first order in that rounding.
    for p in &run.positions {
        assert!(p.kld.abs() < 1.3e-4, "self KLD {}", p.kld);
        assert!(p.p_diff.abs() < 1e-4, "self Δp {}", p.p_diff);
        assert!((p.nll - p.nll_base).abs() < 1e-3);
    }
    let (lq, lb) = (run.sums.log_ppl().0, run.sums.log_ppl_base().0);
    assert!((lq - plain.nll / 15.0).abs() < 1e-5 && (lq - lb).abs() < 1e-4);
    // 15 positions: too few for llama.cpp's closing statistics.
    assert_eq!(KldSummary::new(&run.sums, &run.positions), None);

    // --chunks: the first two chunks only.
    let mut r = LogitsReader::new(&file[..], file.len() as u64).unwrap();
    let two = kl_divergence(&mut s, &mut r, None, Some(2), |_, _| Ok(())).unwrap();
    assert_eq!(two.positions, run.positions[..6]);
}

fn w_header_len(n_ctx: usize, n_vocab: usize, n_chunk: usize) -> u64 {
    engine::perplexity::LogitsHeader {
        n_ctx,
        n_vocab,
        n_chunk,
    }
    .file_len()
    .unwrap()
}

#[test]
fn a_base_of_another_vocabulary_is_refused() {
    let (llama, gemma) = (Tiny::llama(), Tiny::gemma3());
    let text = tokens(16, gemma.n_vocab);
    let mut w = LogitsWriter::new(Vec::new(), 8, gemma.n_vocab as usize, &text).unwrap();
    let plan = ChunkPlan::new(16, 8, None).unwrap();
    let mut gs = session(&gemma.model(), 512);
    perplexity(&mut gs, &text, &plan, None, Some(&mut w), |_, _| Ok(())).unwrap();
    let file = w.finish().unwrap();
    let mut r = LogitsReader::new(&file[..], file.len() as u64).unwrap();
    let mut ls = session(&llama.model(), 512);
    match kl_divergence(&mut ls, &mut r, None, None, |_, _| Ok(())) {
        Err(
            e @ PerplexityError::VocabMismatch {
                file: 40,
                model: 50,
            },
        ) => {
            assert_eq!(
                e.to_string(),
                "the logits file has a vocabulary of 40 tokens, the model 50"
            )
        }
        other => panic!("expected a vocabulary mismatch, got {other:?}"),
    }
}
