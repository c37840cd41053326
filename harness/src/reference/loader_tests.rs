//! Tests of `loader.rs` (its child module `tests`, kept in a file of its own).

use std::collections::BTreeMap;

use super::*;
use crate::reference::arrays::TopKTable;
use crate::reference::format::{
    CaptureConfig, GreedyStop, GreedySummary, LlamaCppInfo, ModelEntry, ModelFacts, ModelsFile,
    Positions, PromptKind, RunSettings, TokenizedText, VocabFacts,
};
use crate::reference::writer::{json_bytes, write_file, write_manifest};

/// A fresh empty directory under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "sharpi-ref-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn tap_info(
    name: &str,
    occurrence: u32,
    op: &str,
    ne: [u64; 4],
    token_dim: Option<usize>,
) -> TapInfo {
    let (base, layer) = match name.rsplit_once('-') {
        Some((b, l)) => (b.to_string(), l.parse().ok()),
        None => (name.to_string(), None),
    };
    TapInfo {
        key: format!("{name}#{occurrence}"),
        name: name.to_string(),
        base,
        layer,
        op: op.to_string(),
        occurrence,
        ggml_type: "f32".into(),
        token_dim,
        kv_dim: None,
        vocab_rows: false,
        ne_one_token: ne,
        weighted_tap: None,
        derived_from: None,
    }
}

/// Writes a complete one-model, one-prompt reference directory with the
/// writer code and returns (dir, arrays, capture).
fn write_tiny(dir: &Path) -> (PromptArrays, ModelCapture, TokenizerCapture) {
    let n_vocab: u32 = 10;
    let models = ModelsFile {
        capture: CaptureConfig {
            threads: 1,
            top_k: 4,
            greedy_steps: 2,
            all_positions_prompt: "a".into(),
        },
        models: vec![ModelEntry {
            id: "tiny".into(),
            file: "models/tiny.gguf".into(),
            sha256: "0".repeat(64),
            architecture: "llama".into(),
            has_chat_template: false,
            prompts: None,
            tap_prompts: None,
            min_first_token_margin: Some(0.5),
            kv_type: None,
        }],
    };
    write_file(&dir.join("models.json"), &json_bytes(&models)).unwrap();
    write_file(&dir.join("prompts/a.txt"), b"one two three").unwrap();
    write_file(&dir.join("prompts/tokenizer.txt"), b"x\n y\n").unwrap();
    write_file(&dir.join("prompts/conversations.json"), b"[]").unwrap();

    let logits = |seed: u32| -> Vec<f32> {
        (0..n_vocab)
            .map(|i| ((i * 7 + seed * 3) % 11) as f32 * 0.37 - 1.0)
            .collect()
    };
    let mut positions = TopKTable::new(4);
    for p in 0..3 {
        positions.push_logits(&logits(p));
    }
    let mut greedy = TopKTable::new(4);
    greedy.push_logits(&logits(2));
    greedy.push_logits(&logits(5));
    let norm = Tap {
        ne: [4, 3, 1, 1],
        data: (0..12).map(|i| i as f32 * 0.5 - 2.0).collect(),
    };
    let q = Tap {
        ne: [2, 2, 3, 1],
        data: (0..12).map(|i| (i as f32).sin()).collect(),
    };
    let arrays = PromptArrays {
        tokens: vec![5, 6, 7],
        positions,
        last_logits: logits(2),
        greedy_tokens: vec![greedy.row(0).ids[0], greedy.row(1).ids[0]],
        greedy,
        taps: BTreeMap::from([
            ("attn_norm-0#0".to_string(), norm),
            ("Qcur-0#1".to_string(), q),
        ]),
    };
    write_file(
        &dir.join("tiny/a.safetensors"),
        &arrays.to_safetensors().unwrap(),
    )
    .unwrap();
    // prompt b: no taps recorded (its model entry's tap_prompts left it out)
    write_file(&dir.join("prompts/b.txt"), b"four").unwrap();
    let mut b_positions = TopKTable::new(4);
    b_positions.push_logits(&logits(5));
    let b_arrays = PromptArrays {
        tokens: vec![8],
        greedy_tokens: vec![b_positions.row(0).ids[0]],
        greedy: b_positions.clone(),
        positions: b_positions,
        last_logits: logits(5),
        taps: BTreeMap::new(),
    };
    write_file(
        &dir.join("tiny/b.safetensors"),
        &b_arrays.to_safetensors().unwrap(),
    )
    .unwrap();

    let taps = vec![
        // an unweighted norm: in the catalog, never stored
        TapInfo {
            weighted_tap: Some("attn_norm-0#0".into()),
            ..tap_info("norm-0", 0, "RMS_NORM", [4, 1, 1, 1], Some(1))
        },
        tap_info("attn_norm-0", 0, "MUL", [4, 1, 1, 1], Some(1)),
        tap_info("Qcur-0", 0, "MUL_MAT", [4, 1, 1, 1], Some(1)),
        tap_info("Qcur-0", 1, "RESHAPE", [2, 2, 1, 1], Some(2)),
        // derived: not stored, the sum of a stored and an aliased tap
        TapInfo {
            derived_from: Some(["attn_norm-0#0".into(), "Qcur-0#0".into()]),
            ..tap_info("l_out-0", 0, "ADD", [4, 1, 1, 1], Some(1))
        },
        TapInfo {
            vocab_rows: true,
            ..tap_info(
                "result_output",
                0,
                "MUL_MAT",
                [n_vocab as u64, 1, 1, 1],
                Some(1),
            )
        },
    ];
    let prompt = PromptCapture {
        id: "a".into(),
        kind: PromptKind::Text,
        add_special: true,
        parse_special: false,
        text_sha256: crate::reference::writer::sha256_hex(b"one two three"),
        n_tokens: 3,
        n_kv: None,
        kv_len: None,
        file: "tiny/a.safetensors".into(),
        taps_recorded: true,
        tap_positions: Positions::All,
        greedy: GreedySummary {
            n_tokens: 2,
            stop: GreedyStop::Length,
            text: " four".into(),
            text_hex: None,
        },
        first_token_margin: {
            let last = arrays.positions.row(2);
            last.values[0] - last.values[1]
        },
        tap_run_logits_max_abs_diff: 0.0,
        tap_aliases: BTreeMap::from([
            ("Qcur-0#0".to_string(), "tap/Qcur-0#1".to_string()),
            ("result_output#0".to_string(), "logits/last".to_string()),
        ]),
    };
    let prompt_b = PromptCapture {
        id: "b".into(),
        n_tokens: 1,
        text_sha256: crate::reference::writer::sha256_hex(b"four"),
        file: "tiny/b.safetensors".into(),
        taps_recorded: false,
        tap_positions: Positions::Last,
        greedy: GreedySummary {
            n_tokens: 1,
            stop: GreedyStop::Length,
            text: "!".into(),
            text_hex: None,
        },
        first_token_margin: {
            let last = b_arrays.positions.row(0);
            last.values[0] - last.values[1]
        },
        tap_aliases: BTreeMap::new(),
        ..prompt.clone()
    };
    let capture = ModelCapture {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        model: models.models[0].clone(),
        llama_cpp: LlamaCppInfo {
            crate_version: "test".into(),
            crate_commit: "0".into(),
            llama_version: "0".into(),
            ggml_version: "0".into(),
            ggml_commit: "unknown".into(),
            system_info: String::new(),
        },
        settings: RunSettings {
            threads: 1,
            n_ctx: 256,
            n_batch: 256,
            n_ubatch: 256,
            flash_attn: "disabled".into(),
            type_k: "f32".into(),
            type_v: "f32".into(),
            swa_full: true,
            weight_repack: false,
            top_k: 4,
            greedy_steps: 2,
            greedy: "argmax".into(),
        },
        facts: ModelFacts {
            n_layer: 1,
            n_embd: 4,
            n_head: 2,
            n_head_kv: 2,
            n_vocab,
            n_ctx_train: 256,
            desc: "tiny".into(),
        },
        vocab: VocabFacts {
            n_tokens: n_vocab,
            add_bos: false,
            add_eos: false,
            bos: 1,
            eos: 2,
            eot: -1,
            eog_tokens: vec![2],
        },
        tokenizer: "tiny/tokenizer.json".into(),
        taps,
        prompts: vec![prompt, prompt_b],
    };
    write_file(&dir.join("tiny/capture.json"), &json_bytes(&capture)).unwrap();
    let tok = TokenizerCapture {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        model: "tiny".into(),
        corpus: "prompts/tokenizer.txt".into(),
        corpus_sha256: crate::reference::writer::sha256_hex(b"x\n y\n"),
        add_special: true,
        whole: TokenizedText {
            plain: vec![3, 4],
            special: vec![3, 4],
        },
        lines: vec![
            TokenizedText {
                plain: vec![3],
                special: vec![3],
            },
            TokenizedText {
                plain: vec![4],
                special: vec![4],
            },
        ],
    };
    write_file(&dir.join("tiny/tokenizer.json"), &json_bytes(&tok)).unwrap();
    write_manifest(dir, &models).unwrap();
    (arrays, capture, tok)
}

#[test]
fn a_capture_written_by_the_writer_loads_back_identically() {
    let dir = temp_dir("roundtrip");
    let (arrays, capture, tok) = write_tiny(&dir);
    let data = ReferenceData::open(&dir).unwrap();
    data.verify_files().unwrap();
    let m = data.manifest();
    assert_eq!(m.files.len(), 9, "{:?}", m.files);
    assert_eq!(m.tokenizer_corpus.count, 2);
    assert_eq!(m.models[0].prompts, vec!["a".to_string(), "b".to_string()]);

    let model = data.model("tiny").unwrap();
    assert_eq!(model.capture(), &capture);
    assert_eq!(model.tokenizer().unwrap(), tok);
    assert!(model.chat_renders().unwrap().is_none());
    let p = model.load_prompt("a").unwrap();
    assert_eq!(p.arrays, arrays);
    assert_eq!(p.tokens(), &[5, 6, 7]);
    assert_eq!(p.position(2), arrays.positions.row(2));
    assert_eq!(p.greedy_step(1).ids[0], p.greedy_tokens()[1]);

    // lookups by op, occurrence and last; aliases rebuilt with their shape
    let (info, t) = p.tap("Qcur", Some(0), TapSel::Op("RESHAPE")).unwrap();
    assert_eq!((info.occurrence, t.ne), (1, [2, 2, 3, 1]));
    let (info, t) = p.tap("Qcur", Some(0), TapSel::Occurrence(0)).unwrap();
    assert_eq!(info.op, "MUL_MAT");
    assert_eq!(
        t.ne,
        [4, 3, 1, 1],
        "alias takes the aliasing tap's own shape"
    );
    assert_eq!(t.data, arrays.taps["Qcur-0#1"].data);
    assert_eq!(
        p.tap("Qcur", Some(0), TapSel::Last).unwrap().0.occurrence,
        1
    );
    let (_, t) = p.tap("result_output", None, TapSel::Last).unwrap();
    assert_eq!((t.ne, &t.data), ([10, 1, 1, 1], &arrays.last_logits));
    assert!(p.tap("Qcur", Some(1), TapSel::Last).is_none());
    assert!(p.tap("Kcur", Some(0), TapSel::Last).is_none());
    assert_eq!(model.taps_named("Qcur", Some(0)).len(), 2);
    // the unweighted norm is catalogued, not stored
    let norm = model.tap_info("norm", Some(0), TapSel::Last).unwrap();
    assert!(!norm.is_recorded());
    assert_eq!(norm.weighted_tap.as_deref(), Some("attn_norm-0#0"));
    assert!(p.tap("norm", Some(0), TapSel::Last).is_none());
    assert!(p.tap("attn_norm", Some(0), TapSel::Last).is_some());
    let last = p.position(2);
    assert_eq!(p.info.first_token_margin, last.values[0] - last.values[1]);
    // a derived tap is rebuilt from its operands (one of them an alias)
    let (_, sum) = p.tap("l_out", Some(0), TapSel::Last).unwrap();
    assert_eq!(sum.ne, [4, 3, 1, 1]);
    let want: Vec<f32> = arrays.taps["attn_norm-0#0"]
        .data
        .iter()
        .zip(&arrays.taps["Qcur-0#1"].data)
        .map(|(a, b)| a + b)
        .collect();
    assert_eq!(sum.data, want);

    // a prompt without taps: arrays load, tap lookups find nothing
    let b = model.load_prompt("b").unwrap();
    assert!(!b.info.taps_recorded);
    assert_eq!(b.tokens(), &[8]);
    assert!(b.arrays.taps.is_empty());
    assert!(b.tap("Qcur", Some(0), TapSel::Last).is_none());
    assert!(b.tap("result_output", None, TapSel::Last).is_none());
    assert!(b.tap("l_out", Some(0), TapSel::Last).is_none());
    assert!(model.load_prompt("c").is_err());

    // the same inputs give the same bytes
    let again = temp_dir("roundtrip-again");
    write_tiny(&again);
    for f in &m.files {
        let a = std::fs::read(dir.join(&f.path)).unwrap();
        let b = std::fs::read(again.join(&f.path)).unwrap();
        assert_eq!(a, b, "{} differs between two writes", f.path);
    }
    assert_eq!(
        std::fs::read(dir.join("manifest.json")).unwrap(),
        std::fs::read(again.join("manifest.json")).unwrap()
    );
    std::fs::remove_dir_all(&again).unwrap();

    // a changed byte is caught
    let f = dir.join("tiny/a.safetensors");
    let mut bytes = std::fs::read(&f).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&f, bytes).unwrap();
    let e = data.verify_files().unwrap_err().to_string();
    assert!(
        e.contains("tiny/a.safetensors") && e.contains("SHA-256"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn arrays_reject_another_format_and_inconsistent_tables() {
    let mut a = PromptArrays {
        tokens: vec![1, 2],
        positions: TopKTable::new(2),
        ..PromptArrays::default()
    };
    a.greedy = TopKTable::new(2);
    a.positions.push_logits(&[1.0, 2.0, 3.0]);
    assert!(a.to_safetensors().is_err(), "one row for two tokens");
    a.positions.push_logits(&[3.0, 2.0, 1.0]);
    let bytes = a.to_safetensors().unwrap();
    assert_eq!(PromptArrays::from_safetensors(&bytes).unwrap(), a);
    let other = safetensors::serialize(
        Vec::<(String, safetensors::tensor::TensorView)>::new(),
        None,
    )
    .unwrap();
    assert!(PromptArrays::from_safetensors(&other).is_err());
}
