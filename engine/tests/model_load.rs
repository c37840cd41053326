//! Loading checks a GGUF file against its architecture's table: every
//! defect is a one-line typed error naming what is wrong, never a panic.

use crate::model_support;

use engine::model::{AttnKind, ModelError};
use engine::GgmlType;
use model_support::{gguf_support::Kv, load, Image, Tiny, V};

fn without_key(mut img: Image, key: &str) -> Image {
    let before = img.kvs.len();
    img.kvs.retain(|kv| kv.key != key.as_bytes());
    assert_eq!(img.kvs.len() + 1, before, "{key} was in the image");
    img
}

fn with_key(mut img: Image, key: &str, value: V) -> Image {
    img.kvs.retain(|kv| kv.key != key.as_bytes());
    img.kvs.push(Kv {
        key: key.as_bytes().to_vec(),
        value,
    });
    img
}

/// Loads `img`, expecting an error whose one-line message contains every
/// one of `parts`.
fn fails(img: &Image, parts: &[&str]) -> ModelError {
    let e = match load(img) {
        Ok(_) => panic!("loaded; expected an error containing {parts:?}"),
        Err(e) => e,
    };
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "multi-line message: {msg}");
    for p in parts {
        assert!(msg.contains(p), "{msg:?} does not mention {p:?}");
    }
    e
}

#[test]
fn tiny_llama_loads_with_tied_head() {
    let m = Tiny::llama().model();
    let hp = m.hparams();
    assert_eq!(
        (
            hp.n_layer,
            hp.n_embd,
            hp.n_head,
            hp.n_kv_head,
            hp.head_dim_k
        ),
        (2, 64, 4, 2, 16)
    );
    assert_eq!((hp.n_vocab, hp.n_rot, hp.n_ff), (50, 16, 128));
    assert_eq!(hp.attn_scale, 0.25);
    assert_eq!(hp.embed_scale, None);
    assert!(m.tensors().tied_output);
    assert!(m
        .layers()
        .iter()
        .all(|l| l.attn == AttnKind::Global && l.rope_base == 1e4));
}

#[test]
fn tiny_gemma3_layer_table() {
    let m = Tiny::gemma3().model();
    let hp = m.hparams();
    assert_eq!(hp.attn_scale, 1.0 / 32f32.sqrt());
    assert_eq!(hp.embed_scale, Some(8.0));
    assert!(!m.tensors().tied_output);
    // Period 2: layer il slides iff il % 2 < 1.
    let kinds: Vec<AttnKind> = m.layers().iter().map(|l| l.attn).collect();
    let local = AttnKind::Local { window: 4 };
    assert_eq!(kinds, [local, AttnKind::Global, local]);
    // Sliding layers use the SWA base (default 10000), global ones freq_base.
    let bases: Vec<f32> = m.layers().iter().map(|l| l.rope_base).collect();
    assert_eq!(bases, [1e4, 1e6, 1e4]);
}

#[test]
fn gemma3_swa_pattern_default_and_array() {
    // Without the pattern key: llama.cpp's default period 6 (last of each 6 global).
    let t = Tiny {
        n_layer: 7,
        ..Tiny::gemma3()
    };
    let img = without_key(t.image(), "gemma3.attention.sliding_window_pattern");
    let m = load(&img).unwrap();
    let global: Vec<usize> = (0..7)
        .filter(|&l| m.layers()[l].attn == AttnKind::Global)
        .collect();
    assert_eq!(global, [5]);
    // A bool array says it per layer; freq_base_swa is read.
    let img = with_key(
        with_key(
            t.image(),
            "gemma3.attention.sliding_window_pattern",
            V::Arr(7, (0..7).map(|l| V::Bool(u8::from(l % 3 == 0))).collect()),
        ),
        "gemma3.rope.freq_base_swa",
        V::F32(5000.0),
    );
    let m = load(&img).unwrap();
    let local: Vec<usize> = (0..7)
        .filter(|&l| m.layers()[l].attn != AttnKind::Global)
        .collect();
    assert_eq!(local, [0, 3, 6]);
    assert_eq!(m.layers()[0].rope_base, 5000.0);
    // A window of 0 means no sliding layers at all.
    let img = with_key(t.image(), "gemma3.attention.sliding_window", V::U32(0));
    assert!(load(&img)
        .unwrap()
        .layers()
        .iter()
        .all(|l| l.attn == AttnKind::Global));
    // An array of the wrong length is an error.
    let img = with_key(
        t.image(),
        "gemma3.attention.sliding_window_pattern",
        V::Arr(7, vec![V::Bool(1); 3]),
    );
    fails(
        &img,
        &[
            "gemma3.attention.sliding_window_pattern",
            "one bool per layer",
        ],
    );
}

#[test]
fn unsupported_architecture() {
    let img = with_key(Tiny::llama().image(), "general.architecture", V::s("mamba"));
    let e = fails(
        &img,
        &["unsupported architecture", "mamba", "llama, gemma3"],
    );
    assert!(matches!(e, ModelError::UnsupportedArch { .. }));
}

#[test]
fn missing_required_key() {
    let img = without_key(Tiny::llama().image(), "llama.embedding_length");
    let e = fails(
        &img,
        &["llama: missing metadata key llama.embedding_length"],
    );
    assert!(matches!(e, ModelError::MissingKey { .. }));
    let img = without_key(Tiny::llama().image(), "general.architecture");
    fails(&img, &["general.architecture"]);
}

#[test]
fn wrong_key_type_and_bad_values() {
    let img = with_key(
        Tiny::llama().image(),
        "llama.attention.head_count",
        V::s("four"),
    );
    fails(&img, &["llama.attention.head_count", "string"]);
    let img = with_key(
        Tiny::llama().image(),
        "llama.attention.head_count_kv",
        V::U32(3),
    );
    fails(&img, &["llama.attention.head_count_kv = 3", "must divide"]);
    let img = with_key(Tiny::llama().image(), "llama.block_count", V::U32(0));
    fails(&img, &["llama.block_count = 0"]);
    let img = with_key(
        Tiny::llama().image(),
        "llama.rope.dimension_count",
        V::U32(8),
    );
    fails(&img, &["llama.rope.dimension_count = 8", "n_rot"]);
    let img = with_key(
        Tiny::llama().image(),
        "llama.rope.scaling.type",
        V::s("yarn"),
    );
    let e = fails(&img, &["RoPE scaling type \"yarn\""]);
    assert!(matches!(e, ModelError::Unsupported { .. }));
    let img = with_key(Tiny::llama().image(), "llama.vocab_size", V::U32(51));
    fails(&img, &["llama.vocab_size = 51", "50 rows"]);
    // A llama file saying it has experts must have them, and say how many
    // each token uses; one saying 0 experts is dense.
    let img = with_key(Tiny::llama().image(), "llama.expert_count", V::U32(4));
    fails(&img, &["llama.expert_used_count"]);
    let img = with_key(img, "llama.expert_used_count", V::U32(2));
    fails(&img, &["blk.0.ffn_gate_inp.weight"]);
    let img = with_key(img, "llama.expert_used_count", V::U32(5));
    fails(
        &img,
        &["llama.expert_used_count = 5", "more than expert_count (4)"],
    );
    load(&with_key(
        Tiny::llama().image(),
        "llama.expert_count",
        V::U32(0),
    ))
    .unwrap();
    // Experts used with none to use: refused, whether the count is 0 or
    // absent.
    let used = with_key(Tiny::llama().image(), "llama.expert_used_count", V::U32(2));
    fails(&used, &["llama.expert_used_count = 2", "with no experts"]);
    fails(
        &with_key(used, "llama.expert_count", V::U32(0)),
        &["llama.expert_used_count = 2", "with no experts"],
    );
}

#[test]
fn linear_rope_scaling_sets_freq_scale() {
    let img = with_key(
        with_key(
            Tiny::llama().image(),
            "llama.rope.scaling.type",
            V::s("linear"),
        ),
        "llama.rope.scaling.factor",
        V::F32(4.0),
    );
    let m = load(&img).unwrap();
    assert_eq!(m.hparams().rope_freq_scale, 0.25);
    assert!(m.layers().iter().all(|l| l.rope_freq_scale == 0.25));
}

#[test]
fn missing_tensor() {
    let mut img = Tiny::llama().image();
    img.tensors.retain(|t| t.name != b"blk.1.ffn_up.weight");
    let e = fails(&img, &["llama: missing tensor blk.1.ffn_up.weight"]);
    assert!(matches!(e, ModelError::MissingTensor { .. }));
}

#[test]
fn wrong_shape() {
    let mut img = Tiny::llama().image();
    let t = img
        .tensors
        .iter_mut()
        .find(|t| t.name == b"blk.0.attn_k.weight")
        .unwrap();
    t.dims = vec![32, 64];
    fails(
        &img,
        &["tensor blk.0.attn_k.weight has shape [32, 64], expected [64, 32]"],
    );
}

#[test]
fn unexpected_tensor() {
    let img = Tiny::llama()
        .image()
        .tensor("rope_freqs.weight", GgmlType::F32, &[8]);
    let e = fails(&img, &["unexpected tensor rope_freqs.weight"]);
    assert!(matches!(e, ModelError::UnexpectedTensor { .. }));
    // gemma3's extra tensors are unexpected in a llama file.
    let img = Tiny::llama()
        .image()
        .tensor("blk.0.attn_q_norm.weight", GgmlType::F32, &[16]);
    fails(&img, &["unexpected tensor blk.0.attn_q_norm.weight"]);
}

#[test]
fn unsupported_tensor_types() {
    let t = Tiny {
        matrix_type: GgmlType::IQ4_NL,
        ..Tiny::llama()
    };
    // IQ4_NL cannot be quantized by `quant`; build the image with its
    // placeholder data.
    let mut img = Image::new(3);
    let good = Tiny::llama().image();
    img.kvs = good.kvs.clone();
    for tensor in &good.tensors {
        let name = String::from_utf8(tensor.name.clone()).unwrap();
        let ty = if name.ends_with("attn_q.weight") {
            t.matrix_type
        } else {
            match GgmlType::from_id(tensor.ty) {
                engine::TypeId::Known(ty) => ty,
                other => panic!("{other:?}"),
            }
        };
        img = img.tensor(&name, ty, &tensor.dims);
    }
    fails(&img, &["blk.0.attn_q.weight", "IQ4_NL"]);
    // A quantized norm vector is refused too.
    let mut img = Tiny::llama().image();
    let n = img
        .tensors
        .iter_mut()
        .find(|t| t.name == b"output_norm.weight")
        .unwrap();
    n.ty = GgmlType::Q8_0.id();
    n.dims = vec![64];
    // Q8_0 [64] takes 68 bytes, less than the F32 data already there.
    fails(&img, &["output_norm.weight", "Q8_0", "norm vector"]);
}

/// llama's attention biases are optional, as llama.cpp loads them: read
/// where the file has them (each layer on its own), checked for shape and
/// type; other architectures' tables do not list them.
#[test]
fn attention_biases_are_optional_and_checked() {
    use engine::model::Role;
    let t = Tiny {
        biases: true,
        ..Tiny::llama()
    };
    let roles = [
        Role::AttnQBias,
        Role::AttnKBias,
        Role::AttnVBias,
        Role::AttnOutBias,
    ];
    let m = t.model();
    for layer in &m.tensors().layers {
        assert!(roles.iter().all(|r| layer.contains_key(r)));
    }
    let plain = Tiny::llama().model();
    assert!(plain.tensors().layers[0].keys().all(|r| !roles.contains(r)));
    // One layer without its K bias: that layer runs without it.
    let mut img = t.image();
    img.tensors.retain(|t| t.name != b"blk.1.attn_k.bias");
    let m = load(&img).unwrap();
    assert!(m.tensors().layers[0].contains_key(&Role::AttnKBias));
    assert!(!m.tensors().layers[1].contains_key(&Role::AttnKBias));
    // A bias is one row of its product's width, in a float type.
    let mut img = t.image();
    let b = img
        .tensors
        .iter_mut()
        .find(|t| t.name == b"blk.0.attn_output.bias")
        .unwrap();
    b.dims = vec![32];
    fails(
        &img,
        &["tensor blk.0.attn_output.bias has shape [32], expected [64]"],
    );
    let img = Tiny::llama()
        .image()
        .tensor("blk.0.attn_q.bias", GgmlType::Q8_0, &[64]);
    fails(&img, &["blk.0.attn_q.bias", "Q8_0", "a bias (must be F32"]);
    let img = Tiny::gemma3()
        .image()
        .tensor("blk.0.attn_q.bias", GgmlType::F32, &[64]);
    fails(&img, &["unexpected tensor blk.0.attn_q.bias"]);
}
