//! Tiny synthetic models (llama and gemma3 layouts) as GGUF images with
//! random, deterministic weights, for fast forward-pass tests.
#![allow(dead_code)]

use std::sync::Arc;

use engine::gguf::GgufFile;
use engine::model::Model;
use engine::quant::quantize_row;
use engine::GgmlType;

// The including binary declares gguf_support at its root (tests/files.rs,
// vulkan.rs, vulkan_moe_cache_fault.rs).
pub(crate) use crate::gguf_support;

pub use gguf_support::{Image, V};

/// A deterministic generator (xorshift).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [-1, 1).
    pub fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Shape of a tiny model.
#[derive(Clone, Debug)]
pub struct Tiny {
    pub arch: &'static str,
    pub n_layer: u32,
    pub n_embd: u64,
    pub n_ff: u64,
    pub n_head: u32,
    pub n_kv_head: u32,
    pub head_dim: u64,
    pub n_vocab: u64,
    pub n_ctx: u32,
    /// gemma3 only: sliding window and pattern period.
    pub window: u32,
    pub period: u32,
    /// Separate output.weight (else tied).
    pub output: bool,
    pub matrix_type: GgmlType,
    /// llama only: the attention projections' biases (`attn_q.bias`,
    /// `attn_k.bias`, `attn_v.bias`, `attn_output.bias`) in every layer.
    pub biases: bool,
}

impl Tiny {
    pub fn llama() -> Tiny {
        Tiny {
            arch: "llama",
            n_layer: 2,
            n_embd: 64,
            n_ff: 128,
            n_head: 4,
            n_kv_head: 2,
            head_dim: 16,
            n_vocab: 50,
            n_ctx: 64,
            window: 0,
            period: 0,
            output: false,
            matrix_type: GgmlType::Q8_0,
            biases: false,
        }
    }

    pub fn gemma3() -> Tiny {
        Tiny {
            arch: "gemma3",
            n_layer: 3,
            n_embd: 64,
            n_ff: 96,
            n_head: 2,
            n_kv_head: 1,
            head_dim: 32,
            n_vocab: 40,
            n_ctx: 64,
            window: 4,
            period: 2,
            output: true,
            matrix_type: GgmlType::Q8_0,
            biases: false,
        }
    }

    /// The GGUF image: metadata, then tensors with placeholder data (see
    /// [`fill`]).
    pub fn image(&self) -> Image {
        let a = self.arch;
        let k = |s: &str| format!("{a}.{s}");
        let mut img = Image::new(3)
            .kv("general.architecture", V::s(a))
            .kv(&k("block_count"), V::U32(self.n_layer))
            .kv(&k("context_length"), V::U32(self.n_ctx))
            .kv(&k("embedding_length"), V::U32(self.n_embd as u32))
            .kv(&k("feed_forward_length"), V::U32(self.n_ff as u32))
            .kv(&k("attention.head_count"), V::U32(self.n_head))
            .kv(&k("attention.head_count_kv"), V::U32(self.n_kv_head))
            .kv(&k("attention.layer_norm_rms_epsilon"), V::F32(1e-6))
            .kv(
                &k("rope.freq_base"),
                V::F32(if a == "gemma3" { 1e6 } else { 1e4 }),
            );
        if a == "gemma3" {
            img = img
                .kv(&k("attention.key_length"), V::U32(self.head_dim as u32))
                .kv(&k("attention.value_length"), V::U32(self.head_dim as u32))
                .kv(&k("attention.sliding_window"), V::U32(self.window))
                .kv(&k("attention.sliding_window_pattern"), V::U32(self.period));
        } else {
            img = img.kv(&k("rope.dimension_count"), V::U32(self.head_dim as u32));
        }
        let (d, ff, v) = (self.n_embd, self.n_ff, self.n_vocab);
        let (q, kv) = (
            u64::from(self.n_head) * self.head_dim,
            u64::from(self.n_kv_head) * self.head_dim,
        );
        let m = self.matrix_type;
        img = img
            .tensor("token_embd.weight", GgmlType::Q8_0, &[d, v])
            .tensor("output_norm.weight", GgmlType::F32, &[d]);
        if self.output {
            img = img.tensor("output.weight", GgmlType::F16, &[d, v]);
        }
        for l in 0..self.n_layer {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            img = img
                .tensor(&n("attn_norm"), GgmlType::F32, &[d])
                .tensor(&n("attn_q"), m, &[d, q])
                .tensor(&n("attn_k"), m, &[d, kv])
                .tensor(&n("attn_v"), GgmlType::F16, &[d, kv])
                .tensor(&n("attn_output"), m, &[q, d])
                .tensor(&n("ffn_norm"), GgmlType::F32, &[d])
                .tensor(&n("ffn_gate"), m, &[d, ff])
                .tensor(&n("ffn_up"), m, &[d, ff])
                .tensor(&n("ffn_down"), m, &[ff, d]);
            if a == "gemma3" {
                img = img
                    .tensor(&n("attn_q_norm"), GgmlType::F32, &[self.head_dim])
                    .tensor(&n("attn_k_norm"), GgmlType::F32, &[self.head_dim])
                    .tensor(&n("post_attention_norm"), GgmlType::F32, &[d])
                    .tensor(&n("post_ffw_norm"), GgmlType::F32, &[d]);
            }
        }
        // Last, so that every other tensor draws the values it draws
        // without them.
        for l in (0..self.n_layer).filter(|_| self.biases) {
            let b = |s: &str| format!("blk.{l}.{s}.bias");
            img = img
                .tensor(&b("attn_q"), GgmlType::F32, &[q])
                .tensor(&b("attn_k"), GgmlType::F32, &[kv])
                .tensor(&b("attn_v"), GgmlType::F32, &[kv])
                .tensor(&b("attn_output"), GgmlType::F32, &[d]);
        }
        fill(&mut img, 1);
        img
    }

    /// The checked model.
    pub fn model(&self) -> Arc<Model> {
        Arc::new(load(&self.image()).expect("tiny model loads"))
    }
}

/// Replaces every tensor's data with random values: norm vectors around 1,
/// biases and matrices uniform in [-0.5, 0.5), quantized to the tensor's
/// type.
pub fn fill(img: &mut Image, seed: u64) {
    let mut r = Rng::new(seed);
    for t in &img.tensors {
        let ty = match GgmlType::from_id(t.ty) {
            engine::TypeId::Known(ty) => ty,
            other => panic!("{other:?}"),
        };
        let n: u64 = t.dims.iter().product();
        let vals: Vec<f32> = if t.dims.len() == 1 && !t.name.ends_with(b".bias") {
            (0..n).map(|_| 1.0 + 0.2 * r.f()).collect()
        } else {
            (0..n).map(|_| 0.5 * r.f()).collect()
        };
        let len = ty.bytes_for(n).unwrap() as usize;
        let at = t.offset as usize;
        quantize_row(ty, &vals, &mut img.data[at..at + len]).unwrap();
    }
}

/// Parses and checks an image.
pub fn load(img: &Image) -> Result<Model, engine::model::ModelError> {
    Model::from_gguf(Arc::new(
        GgufFile::from_bytes(img.encode()).expect("valid GGUF"),
    ))
}
