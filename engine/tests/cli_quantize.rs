//! `sharpi quantize` and `sharpi synth` as processes: output that does not
//! depend on the thread count, the recipe on a small model, the summary,
//! and one-line errors (exit code 1, or 2 for a bad argument) that leave no
//! output file behind.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::cli_support::sharpi;
use engine::gguf::{GgufFile, GgufWriter, Value};
use engine::GgmlType;

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sharpi-cli-q-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One stderr line starting "sharpi: error: ", exit code `code`.
fn assert_one_line_error(o: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.starts_with("sharpi: error: "), "{err:?}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
}

/// A small F32 llama model: 2 layers, width 256, FFN 512, 64 tokens, tied
/// embeddings, with values from a fixed LCG.
fn write_small_llama(path: &Path) {
    let mut state = 12345u32;
    let mut values = |n: u64| -> Vec<u8> {
        (0..n)
            .flat_map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((state >> 8) as f32 / 16_777_216.0 - 0.5).to_le_bytes()
            })
            .collect()
    };
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()))
        .unwrap();
    w.set("llama.block_count", Value::U32(2)).unwrap();
    w.set("llama.embedding_length", Value::U32(256)).unwrap();
    w.set("llama.feed_forward_length", Value::U32(512)).unwrap();
    w.set("llama.attention.head_count", Value::U32(4)).unwrap();
    w.set("llama.attention.head_count_kv", Value::U32(2))
        .unwrap();
    let mut add = |name: &str, dims: &[u64]| {
        let n = dims.iter().product();
        w.add_tensor(name, GgmlType::F32, dims, values(n)).unwrap();
    };
    add("token_embd.weight", &[256, 64]);
    for i in 0..2 {
        add(&format!("blk.{i}.attn_norm.weight"), &[256]);
        add(&format!("blk.{i}.attn_q.weight"), &[256, 256]);
        add(&format!("blk.{i}.attn_k.weight"), &[256, 128]);
        add(&format!("blk.{i}.attn_v.weight"), &[256, 128]);
        add(&format!("blk.{i}.attn_output.weight"), &[256, 256]);
        add(&format!("blk.{i}.ffn_norm.weight"), &[256]);
        add(&format!("blk.{i}.ffn_gate.weight"), &[256, 512]);
        add(&format!("blk.{i}.ffn_up.weight"), &[256, 512]);
        add(&format!("blk.{i}.ffn_down.weight"), &[512, 256]);
    }
    add("output_norm.weight", &[256]);
    w.write_file(path).unwrap();
}

#[test]
fn quantize_is_thread_count_independent_and_follows_the_recipe() {
    let dir = temp_dir("recipe");
    let src = dir.join("f32.gguf");
    write_small_llama(&src);
    let (a, b) = (dir.join("a.gguf"), dir.join("b.gguf"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    for (out, threads) in [(&a, "1"), (&b, "2")] {
        let o = sharpi(&[
            "quantize",
            &s(&src),
            &s(out),
            "--type",
            "Q4_K_M",
            "--threads",
            threads,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let summary = String::from_utf8_lossy(&o.stdout);
        assert!(
            summary.contains("quantized to Q4_K_M (file type 15)"),
            "{summary}"
        );
        assert!(summary.contains("tensors before: 20 F32"), "{summary}");
        assert!(
            summary.contains("tensors after:  5 F32, 12 Q4_K, 3 Q6_K"),
            "{summary}"
        );
    }
    let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(x == y, "1 and 2 threads gave different files");

    let f = GgufFile::from_bytes(x).unwrap();
    assert_eq!(f.get("general.file_type"), Some(&Value::U32(15)));
    assert_eq!(f.get("general.quantization_version"), Some(&Value::U32(2)));
    let last: Vec<&str> = f.metadata()[f.metadata().len() - 2..]
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(last, ["general.quantization_version", "general.file_type"]);
    // llama.cpp's order: tensors outside blk.N first, then by layer and name.
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        &names[..3],
        [
            "output_norm.weight",
            "token_embd.weight",
            "blk.0.attn_k.weight"
        ]
    );
    let ty = |n: &str| f.tensor(n).unwrap().ty;
    use GgmlType::*;
    // Tied embeddings get the output's Q6_K; of 2 layers, layer 1 gets more
    // bits (i >= 7 * 2 / 8) for attn_v and ffn_down.
    assert_eq!(ty("token_embd.weight"), Q6_K);
    assert_eq!(ty("blk.0.attn_v.weight"), Q4_K);
    assert_eq!(ty("blk.1.attn_v.weight"), Q6_K);
    assert_eq!(ty("blk.0.ffn_down.weight"), Q4_K);
    assert_eq!(ty("blk.1.ffn_down.weight"), Q6_K);
    assert_eq!(ty("blk.1.ffn_up.weight"), Q4_K);
    assert_eq!(ty("blk.1.ffn_norm.weight"), F32);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_type_is_a_one_line_usage_error() {
    let o = sharpi(&["quantize", "in.gguf", "out.gguf", "--type", "q9_k"]);
    assert_one_line_error(&o, 2, "unknown type \"q9_k\" (one of: f32, f16, bf16, q4_0");
}

#[test]
fn missing_input_is_one_line_and_writes_nothing() {
    let dir = temp_dir("missing");
    let out = dir.join("out.gguf");
    let o = sharpi(&[
        "quantize",
        "/nonexistent/model.gguf",
        out.to_str().unwrap(),
        "--type",
        "q8_0",
    ]);
    assert_one_line_error(&o, 1, "cannot read \"/nonexistent/model.gguf\"");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unquantizable_source_is_one_line_and_writes_nothing() {
    let dir = temp_dir("iq");
    let src = dir.join("iq.gguf");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()))
        .unwrap();
    w.set("llama.block_count", Value::U32(1)).unwrap();
    let n = GgmlType::IQ2_XXS.bytes_for(512).unwrap() as usize;
    w.add_tensor(
        "blk.0.attn_q.weight",
        GgmlType::IQ2_XXS,
        &[256, 2],
        vec![0u8; n],
    )
    .unwrap();
    w.write_file(&src).unwrap();
    let out = dir.join("out.gguf");
    let o = sharpi(&[
        "quantize",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "q8_0",
    ]);
    assert_one_line_error(
        &o,
        1,
        "tensor \"blk.0.attn_q.weight\" is IQ2_XXS and must become Q8_0, but dequantization of IQ2_XXS is not supported",
    );
    assert!(!out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn model_without_block_count_is_one_line() {
    let dir = temp_dir("nokey");
    let src = dir.join("m.gguf");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()))
        .unwrap();
    w.write_file(&src).unwrap();
    let o = sharpi(&[
        "quantize",
        src.to_str().unwrap(),
        dir.join("o.gguf").to_str().unwrap(),
        "--type",
        "q4_0",
    ]);
    assert_one_line_error(&o, 1, "metadata key \"llama.block_count\" is missing");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn synth_needs_a_tokenizer_source() {
    let dir = temp_dir("synth");
    let src = dir.join("no-tokenizer.gguf");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()))
        .unwrap();
    w.write_file(&src).unwrap();
    let out = dir.join("s.gguf");
    let o = sharpi(&[
        "synth",
        "--arch",
        "qwen3",
        "--seed",
        "1",
        "--tokenizer-from",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_one_line_error(
        &o,
        1,
        "tokenizer source: metadata key \"tokenizer.ggml.tokens\" is missing",
    );
    assert!(!out.exists());
    let o = sharpi(&[
        "synth",
        "--arch",
        "llama",
        "--seed",
        "1",
        "--tokenizer-from",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_one_line_error(&o, 2, "unknown architecture \"llama\"");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn synth_llama_moe_makes_experts_of_a_dense_llama() {
    let dir = temp_dir("moe");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (f32_src, src) = (dir.join("f32.gguf"), dir.join("q4km.gguf"));
    write_small_llama(&f32_src);
    let o = sharpi(&["quantize", &s(&f32_src), &s(&src), "--type", "q4_k_m"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (a, b) = (dir.join("a.gguf"), dir.join("b.gguf"));
    for (out, threads) in [(&a, "1"), (&b, "2")] {
        let o = sharpi(&[
            "synth",
            "--arch",
            "llama-moe",
            "--seed",
            "5",
            "--from",
            &s(&src),
            &s(out),
            "--threads",
            threads,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let summary = String::from_utf8_lossy(&o.stdout);
        assert!(
            summary.contains("(seed 5, 4 experts, 2 used, noise 0.02, router scale 16, 22 tensors, experts Q4_K, Q6_K)"),
            "{summary}"
        );
    }
    let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(x == y, "1 and 2 threads gave different files");

    let (f, dense) = (
        GgufFile::from_bytes(x).unwrap(),
        GgufFile::open(&src).unwrap(),
    );
    assert_eq!(f.get("llama.expert_count"), Some(&Value::U32(4)));
    assert_eq!(f.get("llama.expert_used_count"), Some(&Value::U32(2)));
    assert_eq!(f.get("general.file_type"), Some(&Value::U32(15)));
    assert_eq!(f.metadata().len(), dense.metadata().len() + 2);
    let t = |n: &str| f.tensor(n).unwrap();
    use GgmlType::*;
    // The Q4_K_M recipe with experts: ffn_down by its layer's number (layer 1
    // of 2 gets more bits), gate and up the default; routers stay F32.
    assert_eq!(t("blk.0.ffn_down_exps.weight").ty, Q4_K);
    assert_eq!(t("blk.1.ffn_down_exps.weight").ty, Q6_K);
    assert_eq!(t("blk.1.ffn_up_exps.weight").dims, [256, 512, 4]);
    assert_eq!(t("blk.1.ffn_down_exps.weight").dims, [512, 256, 4]);
    assert_eq!(
        (
            t("blk.0.ffn_gate_inp.weight").ty,
            &t("blk.0.ffn_gate_inp.weight").dims[..]
        ),
        (F32, &[256, 4][..])
    );
    assert!(f.tensor("blk.0.ffn_up.weight").is_none());
    // Everything else is the source's, bytes and types.
    for d in dense
        .tensors()
        .iter()
        .filter(|d| !d.name.contains(".ffn_") || d.name.contains("ffn_norm"))
    {
        assert_eq!(
            (t(&d.name).ty, &t(&d.name).dims),
            (d.ty, &d.dims),
            "{}",
            d.name
        );
        assert_eq!(
            f.tensor_data(t(&d.name)),
            dense.tensor_data(d),
            "{}",
            d.name
        );
    }

    // Flags that do not fit the kind: one line, no file.
    let out = dir.join("c.gguf");
    let o = sharpi(&["synth", "--arch", "llama-moe", "--seed", "1", &s(&out)]);
    assert_one_line_error(&o, 1, "--arch llama-moe needs --from MODEL");
    let o = sharpi(&[
        "synth",
        "--arch",
        "llama-moe",
        "--seed",
        "1",
        "--from",
        &s(&src),
        &s(&out),
        "--type",
        "q8_0",
    ]);
    assert_one_line_error(&o, 1, "--type does not apply to --arch llama-moe");
    for flag in [&["--tie-qk"][..], &["--qk-norm-scale", "4"]] {
        let mut args = vec!["synth", "--arch", "llama-moe", "--seed", "1", "--from"];
        let (src_s, out_s) = (s(&src), s(&out));
        args.extend([src_s.as_str(), out_s.as_str()]);
        args.extend(flag);
        let o = sharpi(&args);
        let msg = format!("{} does not apply to --arch llama-moe", flag[0]);
        assert_one_line_error(&o, 1, &msg);
    }
    let o = sharpi(&[
        "synth",
        "--arch",
        "qwen3",
        "--seed",
        "1",
        "--tokenizer-from",
        &s(&src),
        &s(&out),
        "--qk-norm-scale",
        "0",
    ]);
    assert_one_line_error(&o, 1, "--qk-norm-scale 0: a positive number");
    let o = sharpi(&[
        "synth",
        "--arch",
        "qwen3",
        "--seed",
        "1",
        "--tokenizer-from",
        &s(&src),
        &s(&out),
        "--expert-noise",
        "0.1",
    ]);
    assert_one_line_error(&o, 1, "--expert-noise does not apply to --arch qwen3");
    let o = sharpi(&[
        "synth",
        "--arch",
        "qwen3",
        "--seed",
        "1",
        "--from",
        &s(&src),
        &s(&out),
    ]);
    assert_one_line_error(&o, 1, "--from does not apply to --arch qwen3");
    let o = sharpi(&[
        "synth",
        "--arch",
        "llama-moe",
        "--seed",
        "1",
        "--from",
        &s(&src),
        &s(&out),
        "--expert-noise",
        "2",
    ]);
    assert_one_line_error(&o, 1, "synth settings: expert noise 2 (0 to below 1)");
    let o = sharpi(&[
        "synth",
        "--arch",
        "llama-moe",
        "--seed",
        "1",
        "--from",
        &s(&a),
        &s(&out),
    ]);
    assert_one_line_error(&o, 1, "source model: it already has 4 experts");
    // --router-twins: qwen3moe only, at most half the experts.
    for (arch, from, twins, error) in [
        (
            "llama-moe",
            "--from",
            "2",
            "--router-twins does not apply to --arch llama-moe",
        ),
        (
            "qwen3",
            "--tokenizer-from",
            "2",
            "--router-twins does not apply to --arch qwen3",
        ),
        (
            "qwen3moe",
            "--tokenizer-from",
            "17",
            "synth settings: 17 router twins of 32 experts (at most half)",
        ),
    ] {
        let o = sharpi(&[
            "synth",
            "--arch",
            arch,
            "--seed",
            "1",
            from,
            &s(&src),
            &s(&out),
            "--router-twins",
            twins,
        ]);
        assert_one_line_error(&o, 1, error);
    }
    assert!(!out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
