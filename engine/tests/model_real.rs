//! The real models, greedy decoding of short raw prompts.
//!
//! Prompt token ids come from llama.cpp's tokenizer (the `tokens` arrays of
//! the reference capture, `harness capture` with llama-cpp-sys-2 0.1.161:
//! reference-data/<model>/capital-france and counting), until sharpi's own
//! tokenizer lands; each test also checks the ids against the pieces of the
//! GGUF's own vocabulary, so a wrong id cannot pass unnoticed.

use crate::model_support;

use std::path::Path;
use std::sync::Arc;

use engine::gguf::GgufFile;
use engine::model::Model;
use engine::session::{Session, SessionConfig};
use model_support::gguf_support::{model_path, GEMMA3, SMOLLM2};

fn load(file: &str) -> Arc<Model> {
    Arc::new(Model::load(Path::new(&model_path(file))).unwrap())
}

/// The vocabulary pieces of `ids`, from the GGUF's `tokenizer.ggml.tokens`.
fn pieces(gguf: &GgufFile, ids: &[u32]) -> Vec<String> {
    let vocab = gguf.get_array("tokenizer.ggml.tokens").unwrap();
    ids.iter()
        .map(|&i| vocab[i as usize].as_str().unwrap().to_string())
        .collect()
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy continuation of `prompt`, `n` tokens.
fn greedy(m: &Arc<Model>, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = Session::new(Arc::clone(m), &SessionConfig::default()).unwrap();
    let mut out = vec![argmax(s.prefill(prompt).unwrap())];
    while out.len() < n {
        let next = argmax(s.decode(*out.last().unwrap()).unwrap());
        out.push(next);
    }
    out
}

#[test]
fn smollm2_capital_of_france_is_paris() {
    let m = load(SMOLLM2);
    // "The capital of France is", raw: SmolLM2's metadata says add_bos false.
    assert!(!m.file().get_bool("tokenizer.ggml.add_bos_token").unwrap());
    let prompt = [504, 3575, 282, 4649, 314];
    assert_eq!(
        pieces(m.file(), &prompt),
        ["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"]
    );
    let out = greedy(&m, &prompt, 2);
    assert_eq!(pieces(m.file(), &out), ["ĠParis", "."]);
}

#[test]
fn gemma3_counts_on() {
    let m = load(GEMMA3);
    // "1, 2, 3, 4, 5," with the BOS (2) Gemma's metadata asks for.
    assert!(m.file().get_bool("tokenizer.ggml.add_bos_token").unwrap());
    let prompt = [
        2, 236770, 236764, 236743, 236778, 236764, 236743, 236800, 236764, 236743, 236812, 236764,
        236743, 236810, 236764,
    ];
    assert_eq!(pieces(m.file(), &prompt).concat(), "<bos>1,▁2,▁3,▁4,▁5,");
    let out = greedy(&m, &prompt, 8);
    assert_eq!(pieces(m.file(), &out).concat(), "▁6,▁7,▁8");
}

#[test]
fn gemma3_norm_weights_hold_the_folded_one() {
    // HF Gemma multiplies by (1 + w); llama.cpp's converter stores 1 + w and
    // its graph (like ours) multiplies by the stored value. Stored norm
    // weights therefore sit around 1 or above, not around 0.
    let m = load(GEMMA3);
    let f = m.file();
    for name in [
        "output_norm.weight",
        "blk.0.attn_norm.weight",
        "blk.0.ffn_norm.weight",
    ] {
        let t = f.tensor(name).unwrap();
        let mut v = vec![0.0f32; t.n_elements() as usize];
        engine::quant::dequantize_row(t.ty, f.tensor_data(t), &mut v).unwrap();
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        assert!(mean > 0.5, "{name}: mean {mean}");
    }
}

#[test]
fn smollm2_decode_matches_batched_prefill() {
    use engine::session::Outputs;
    let m = load(SMOLLM2);
    let prompt = [504, 3575, 282, 4649, 314, 7042];
    let v = m.hparams().n_vocab;
    // In the reference numerics: ggml's (the default) sums attention by
    // other kernels for one row than for a batch, as llama.cpp does, and a
    // flipped activation rounding then moves the logits by far more.
    let reference = || {
        let mut s = Session::new(Arc::clone(&m), &SessionConfig::default()).unwrap();
        s.set_cpu_numerics(engine::cpu::CpuNumerics::Reference);
        s
    };
    let mut s = reference();
    let all = s.forward(&prompt, Outputs::All, None).unwrap().to_vec();
    let mut d = reference();
    for (i, &t) in prompt.iter().enumerate() {
        let got = d.decode(t).unwrap();
        let want = &all[i * v..(i + 1) * v];
        let scale = want.iter().fold(0f32, |a, x| a.max(x.abs()));
        let diff = got
            .iter()
            .zip(want)
            .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
        assert!(
            diff <= 1e-5 * scale,
            "position {i}: max diff {diff} (logit scale {scale})"
        );
    }
}
