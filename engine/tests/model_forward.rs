//! Forward passes of tiny synthetic llama and gemma3 models: token-by-token
//! decoding agrees with batched prefill, chunking and hybrid placement do
//! not change results, taps carry llama.cpp's names, errors are one line.

use crate::model_support;

use std::sync::Arc;

use engine::cpu::CpuBackend;
use engine::model::Model;
use engine::ops::{KvType, Ops};
use engine::placement::{Devices, Placement, Side};
use engine::session::{Outputs, Session, SessionConfig, SessionError};
use engine::trace::Recorder;
use model_support::Tiny;

fn tokens(n: usize, vocab: u64) -> Vec<u32> {
    (0..n)
        .map(|i| ((i * 7 + 3) as u64 % vocab) as u32)
        .collect()
}

fn session(m: &Arc<Model>, cfg: &SessionConfig) -> Session {
    Session::new(Arc::clone(m), cfg).unwrap()
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Logits of every position, from one batched pass.
fn prefill_all(m: &Arc<Model>, cfg: &SessionConfig, toks: &[u32]) -> Vec<f32> {
    let mut s = session(m, cfg);
    s.forward(toks, Outputs::All, None).unwrap().to_vec()
}

fn decode_matches_prefill(t: Tiny, n: usize) {
    let m = t.model();
    let toks = tokens(n, t.n_vocab);
    let cfg = SessionConfig::default();
    let all = prefill_all(&m, &cfg, &toks);
    let v = t.n_vocab as usize;
    let mut s = session(&m, &cfg);
    for (i, &tok) in toks.iter().enumerate() {
        let got = s.decode(tok).unwrap();
        let d = max_rel_diff(got, &all[i * v..(i + 1) * v]);
        assert!(
            d <= 1e-6,
            "{} position {i}: decode vs prefill differ by {d:e}",
            t.arch
        );
    }
    assert_eq!(s.pos(), n);
    // prefill() returns the last row of the batched pass.
    let mut s = session(&m, &cfg);
    let last = s.prefill(&toks).unwrap();
    assert!(max_rel_diff(last, &all[(n - 1) * v..]) <= 1e-6);
}

#[test]
fn llama_decode_matches_batched_prefill() {
    decode_matches_prefill(Tiny::llama(), 12);
}

#[test]
fn gemma3_decode_matches_batched_prefill() {
    // 12 tokens: past the sliding window (4) of the local layers.
    decode_matches_prefill(Tiny::gemma3(), 12);
}

#[test]
fn chunked_prefill_matches_one_batch() {
    // In the reference numerics: ggml's (the default) picks its attention
    // and matmul kernels by a batch's rows, as llama.cpp does, so there a
    // chunk's sums may differ from one batch's in the last bits.
    let reference = |m: &Arc<Model>, cfg: &SessionConfig| {
        let mut s = session(m, cfg);
        s.set_cpu_numerics(engine::cpu::CpuNumerics::Reference);
        s
    };
    for t in [Tiny::llama(), Tiny::gemma3()] {
        let m = t.model();
        let toks = tokens(11, t.n_vocab);
        let all = |cfg: &SessionConfig| {
            let mut s = reference(&m, cfg);
            s.forward(&toks, Outputs::All, None).unwrap().to_vec()
        };
        let one = all(&SessionConfig::default());
        let cfg = SessionConfig {
            n_batch: 3,
            ..SessionConfig::default()
        };
        let chunked = all(&cfg);
        assert!(max_rel_diff(&chunked, &one) <= 1e-6, "{}", t.arch);
        let mut s = reference(&m, &cfg);
        let last = s.prefill(&toks).unwrap().to_vec();
        let v = t.n_vocab as usize;
        assert_eq!(last, chunked[10 * v..]);
    }
}

#[test]
fn hybrid_placement_gives_identical_logits() {
    for t in [Tiny::llama(), Tiny::gemma3()] {
        let m = t.model();
        let toks = tokens(9, t.n_vocab);
        let cfg = SessionConfig::default();
        let single = prefill_all(&m, &cfg, &toks);
        let n_layer = t.n_layer as usize;
        for n_first in [0, 1, n_layer] {
            let backends: Vec<Box<dyn Ops>> =
                vec![Box::new(CpuBackend::new(1)), Box::new(CpuBackend::new(2))];
            let devices = Devices::new(backends, Placement::split(n_layer, n_first, 0, 1));
            let mut s = Session::with_devices(Arc::clone(&m), devices, &cfg).unwrap();
            let split = s.forward(&toks, Outputs::All, None).unwrap();
            assert_eq!(
                split,
                &single[..],
                "{} with {n_first} layers on device 0",
                t.arch
            );
            // And decoding continues across the split.
            let next = s.decode(1).unwrap().to_vec();
            let mut one = session(&m, &cfg);
            one.prefill(&toks).unwrap();
            assert_eq!(next, one.decode(1).unwrap());
        }
        // -g N --fixed-on cpu|gpu tables, "GPU" being a second CPU backend.
        for n_gpu in 0..=n_layer {
            for fixed in [None, Some(Side::Cpu), Some(Side::Gpu)] {
                let (table, used) = Placement::gpu_split(n_layer, n_gpu, fixed).compact();
                let backends: Vec<Box<dyn Ops>> = used
                    .iter()
                    .map(|&d| Box::new(CpuBackend::new(d + 1)) as Box<dyn Ops>)
                    .collect();
                let devices = Devices::new(backends, table);
                let mut s = Session::with_devices(Arc::clone(&m), devices, &cfg).unwrap();
                let split = s.forward(&toks, Outputs::All, None).unwrap();
                assert_eq!(split, &single[..], "{} -g {n_gpu} {fixed:?}", t.arch);
            }
        }
    }
}

#[test]
fn f16_kv_cache_stays_close() {
    let t = Tiny::gemma3();
    let m = t.model();
    let toks = tokens(10, t.n_vocab);
    let f32s = prefill_all(&m, &SessionConfig::default(), &toks);
    let cfg = SessionConfig {
        kv_type: KvType::F16,
        ..SessionConfig::default()
    };
    let f16s = prefill_all(&m, &cfg, &toks);
    let d = max_rel_diff(&f16s, &f32s);
    assert!(d > 0.0 && d < 1e-2, "f16 cache differs by {d:e}");
}

#[test]
fn reset_replays_the_same_logits() {
    let t = Tiny::llama();
    let m = t.model();
    let mut s = session(&m, &SessionConfig::default());
    let toks = tokens(5, t.n_vocab);
    let a = s.prefill(&toks).unwrap().to_vec();
    s.decode(3).unwrap();
    s.reset();
    assert_eq!(s.pos(), 0);
    assert_eq!(s.prefill(&toks).unwrap(), a);
}

#[test]
fn session_errors_are_one_line() {
    let t = Tiny::llama();
    let m = t.model();
    let cfg = SessionConfig {
        n_ctx: 8,
        ..SessionConfig::default()
    };
    let mut s = session(&m, &cfg);
    let e = s.prefill(&tokens(9, t.n_vocab)).unwrap_err();
    assert!(matches!(e, SessionError::ContextFull { .. }));
    assert_eq!(
        e.to_string(),
        "context full: 9 tokens at position 0 need 9 positions, the context has 8"
    );
    s.prefill(&tokens(8, t.n_vocab)).unwrap();
    assert!(matches!(
        s.decode(1),
        Err(SessionError::ContextFull { pos: 8, .. })
    ));
    let mut s = session(&m, &cfg);
    let e = s.prefill(&[1, 50]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "token id 50 at index 1 is outside the vocabulary (50 tokens)"
    );
    assert_eq!(s.pos(), 0);
    assert!(matches!(s.prefill(&[]), Err(SessionError::Empty)));
}

/// The tap names, in order, that one forward pass emits.
fn tap_names(t: Tiny, n: usize) -> (Vec<String>, Recorder) {
    let m = t.model();
    let mut s = session(&m, &SessionConfig::default());
    let mut rec = Recorder::new();
    let toks = tokens(n, t.n_vocab);
    let with = s
        .forward(&toks, Outputs::Last, Some(&mut rec))
        .unwrap()
        .to_vec();
    let mut plain = session(&m, &SessionConfig::default());
    assert_eq!(
        plain.prefill(&toks).unwrap(),
        with,
        "a sink must not change results"
    );
    (rec.taps.iter().map(|r| r.key()).collect(), rec)
}

#[test]
fn llama_taps_use_llama_cpp_names() {
    let (names, rec) = tap_names(Tiny::llama(), 3);
    let layer = [
        "attn_norm",
        "Qcur",
        "Kcur",
        "Vcur",
        "kqv_out",
        "attn_out",
        "ffn_inp",
        "ffn_norm",
        "ffn_up",
        "ffn_gate",
        "ffn_swiglu",
        "ffn_out",
        "l_out",
    ];
    let mut want: Vec<String> = Vec::new();
    for l in 0..2 {
        want.extend(layer.iter().map(|n| format!("{n}-{l}")));
    }
    want.extend(["result_norm".to_string(), "result_output".to_string()]);
    assert_eq!(names, want);
    assert_eq!(rec.get("Qcur-1").unwrap().shape, [3, 64]);
    assert_eq!(rec.get("Kcur-0").unwrap().shape, [3, 32]);
    assert_eq!(rec.get("ffn_gate-0").unwrap().shape, [3, 128]);
    assert_eq!(rec.get("result_norm").unwrap().shape, [1, 64]);
    assert_eq!(rec.get("result_output").unwrap().shape, [1, 50]);
}

#[test]
fn gemma3_taps_use_llama_cpp_names() {
    let (names, rec) = tap_names(Tiny::gemma3(), 2);
    let layer = [
        "attn_norm",
        "Qcur_normed",
        "Kcur_normed",
        "Qcur",
        "Kcur",
        "Vcur",
        "kqv_out",
        "attn_post_norm",
        "sa_out",
        "ffn_norm",
        "ffn_up",
        "ffn_gate",
        "ffn_geglu",
        "ffn_out",
        "ffn_post_norm",
        "l_out",
    ];
    let mut want = vec!["inp_scaled".to_string()];
    for l in 0..3 {
        want.extend(layer.iter().map(|n| format!("{n}-{l}")));
    }
    want.extend(["result_norm".to_string(), "result_output".to_string()]);
    assert_eq!(names, want);
    assert_eq!(rec.get("inp_scaled").unwrap().shape, [2, 64]);
    assert_eq!(rec.get("Qcur_normed-2").unwrap().shape, [2, 64]);
    assert_eq!(rec.get("Kcur-2").unwrap().shape, [2, 32]);
}

#[test]
fn recorder_filter_skips_unwanted_taps() {
    let t = Tiny::llama();
    let m = t.model();
    let mut s = session(&m, &SessionConfig::default());
    let mut rec = Recorder::filtered(|name, layer| name == "l_out" && layer == Some(1));
    s.forward(&tokens(4, t.n_vocab), Outputs::Last, Some(&mut rec))
        .unwrap();
    let keys: Vec<String> = rec.taps.iter().map(|r| r.key()).collect();
    assert_eq!(keys, ["l_out-1"]);
}

#[test]
fn a_spec_edit_changes_that_model_and_nothing_else() {
    use engine::gguf::GgufFile;
    use engine::model::{spec, ModelOptions};
    use engine::ops::RopeStyle;
    let t = Tiny::llama();
    let file = Arc::new(GgufFile::from_bytes(t.image().encode()).unwrap());
    let opts = ModelOptions {
        spec_edit: Some(|s| s.rope = RopeStyle::Neox),
    };
    let edited = Arc::new(Model::from_gguf_with(Arc::clone(&file), &opts).unwrap());
    let plain = Arc::new(Model::from_gguf(file).unwrap());
    assert_eq!(edited.spec().rope, RopeStyle::Neox);
    assert_eq!(plain.spec().rope, RopeStyle::Norm);
    assert_eq!(spec::LLAMA.rope, RopeStyle::Norm, "the static table");

    let toks = tokens(6, t.n_vocab);
    let a = prefill_all(&plain, &SessionConfig::default(), &toks);
    let b = prefill_all(&edited, &SessionConfig::default(), &toks);
    let v = t.n_vocab as usize;
    // RoPE at position 0 is the identity: the first position agrees bit
    // for bit; the pairing matters from position 1 on.
    assert_eq!(a[..v], b[..v]);
    assert!(max_rel_diff(&a[v..], &b[v..]) > 1e-3);
}

#[test]
fn llama_with_biases_decodes_as_it_prefills() {
    decode_matches_prefill(
        Tiny {
            biases: true,
            ..Tiny::llama()
        },
        5,
    );
}

/// The taps of one pass of `img`'s model over `n` tokens.
fn taps_of(img: &model_support::Image, n: usize, vocab: u64) -> Recorder {
    let m = Arc::new(model_support::load(img).unwrap());
    let mut rec = Recorder::new();
    session(&m, &SessionConfig::default())
        .forward(&tokens(n, vocab), Outputs::All, Some(&mut rec))
        .unwrap();
    rec
}

/// The biases are added where llama.cpp adds them. Zero biases give the
/// taps of the same model without bias tensors (all of its other weights
/// are drawn alike); V's bias shows in `Vcur` as itself, Q's and K's in
/// `Qcur` and `Kcur` (taken after RoPE) rotated with each row's position:
/// they are added before RoPE.
#[test]
fn biases_are_added_to_the_products_before_rope() {
    let t = Tiny {
        biases: true,
        ..Tiny::llama()
    };
    let n = 4;
    let img = t.image();
    let mut zeroed = img.clone();
    for tensor in img.tensors.iter().filter(|t| t.name.ends_with(b".bias")) {
        let len = tensor.dims[0] as usize * 4;
        let at = tensor.offset as usize;
        zeroed.data[at..at + len].fill(0);
    }
    let plain = taps_of(&Tiny::llama().image(), n, t.n_vocab);
    let zero = taps_of(&zeroed, n, t.n_vocab);
    assert_eq!(
        plain.get("result_output").unwrap().data,
        zero.get("result_output").unwrap().data,
        "zero biases change the logits"
    );
    let biased = taps_of(&img, n, t.n_vocab);
    let bias = |name: &str| -> Vec<f32> {
        let tensor = img
            .tensors
            .iter()
            .find(|t| t.name == name.as_bytes())
            .expect("a bias tensor");
        let at = tensor.offset as usize;
        img.data[at..at + tensor.dims[0] as usize * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    // Each bias repeated on every row, rotated as the layer rotates Q and K.
    let rotated = |b: &[f32], rope: bool| -> Vec<f32> {
        let mut cpu = CpuBackend::new(1);
        let x = cpu.alloc(n, b.len()).unwrap();
        cpu.write(x, &b.repeat(n)).unwrap();
        if rope {
            let p = engine::ops::RopeParams {
                style: engine::ops::RopeStyle::Norm,
                head_dim: t.head_dim as usize,
                n_rot: t.head_dim as usize,
                base: 1e4,
                freq_scale: 1.0,
            };
            cpu.rope(x, &p, 0);
        }
        let mut out = vec![0.0; x.len()];
        cpu.read(x, &mut out).unwrap();
        out
    };
    for l in 0..t.n_layer as usize {
        // Layer 0's Q, K, V see the same input in both models (later
        // layers see the biased model's own residual stream).
        let layer0 = l == 0;
        for (tap, name, rope) in [
            ("Qcur", "attn_q", true),
            ("Kcur", "attn_k", true),
            ("Vcur", "attn_v", false),
        ] {
            let key = format!("{tap}-{l}");
            let (with, without) = (biased.get(&key).unwrap(), zero.get(&key).unwrap());
            let want = rotated(&bias(&format!("blk.{l}.{name}.bias")), rope);
            if !layer0 {
                assert_ne!(with.data, without.data, "{key}: the bias changes nothing");
                continue;
            }
            for (i, ((&a, &b), &w)) in with.data.iter().zip(&without.data).zip(&want).enumerate() {
                let d = a - b;
                assert!(
                    (d - w).abs() <= 1e-5 * (1.0 + a.abs() + b.abs()),
                    "{key} element {i}: the bias moved it by {d}, not {w}"
                );
            }
        }
    }
}
