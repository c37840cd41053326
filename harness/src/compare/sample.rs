//! A small hand-made [`Report`] for the tests of the report writers.

use crate::compare::checks::cross::CrossResult;
use crate::compare::checks::greedy::{GreedyResult, Outcome};
use crate::compare::checks::logits::{LogitsResult, PositionStat};
use crate::compare::checks::taps::{TapRow, TapsResult};
use crate::compare::checks::tokens::{ChatCheck, CorpusCheck, PromptTokens, RenderMismatch};
use crate::compare::checks::Checks;
use crate::compare::report::{ModelReport, PromptReport};
use crate::compare::{Failure, Path, Report};
use crate::metrics;

fn taps(layers: usize, scale: f64, reference: &str) -> TapsResult {
    let mut rows = Vec::new();
    for l in 0..layers {
        for (i, name) in ["attn_norm", "Qcur", "l_out"].iter().enumerate() {
            let nmse = scale * (1.0 + l as f64) * (1.0 + i as f64);
            rows.push(TapRow {
                name: name.to_string(),
                layer: Some(l),
                reference: format!("{reference}{name}-{l}"),
                op: String::new(),
                positions: 1,
                nmse,
                max_abs: nmse.sqrt(),
                cosine: 1.0 - nmse,
                limit: 1e-3,
                pass: nmse <= 1e-3,
            });
        }
    }
    rows.push(TapRow {
        name: "result_norm".into(),
        layer: None,
        reference: format!("{reference}result_norm"),
        op: String::new(),
        positions: 1,
        nmse: 0.0,
        max_abs: 0.0,
        cosine: 1.0,
        limit: 1e-3,
        pass: true,
    });
    let first_divergence = rows.iter().find(|r| !r.pass).cloned();
    TapsResult {
        rows,
        first_divergence,
        unmatched: Vec::new(),
        routing_near_ties: Vec::new(),
        routing_set_gap: None,
    }
}

fn logits(n: usize, scale: f64, disagree: &[usize]) -> LogitsResult {
    let per_position: Vec<PositionStat> = (0..n)
        .map(|p| PositionStat {
            kld: scale * (1.0 + (p % 3) as f64),
            top1: !disagree.contains(&p),
            margin: 1.0,
            margin_to_ours: disagree.contains(&p).then_some(0.5),
            identical: false,
        })
        .collect();
    let klds: Vec<f64> = per_position.iter().map(|p| p.kld).collect();
    LogitsResult {
        nmse: scale,
        max_abs: scale,
        cosine: 1.0,
        argmax_ours: Some(1),
        argmax_reference: Some(1),
        kld: metrics::summarize(&klds),
        top1_agree: n - disagree.len(),
        positions: n,
        top1_near_ties: 0,
        top1_hard: disagree.len(),
        per_position,
    }
}

fn prompt(path: Path, scale: f64) -> PromptReport {
    let mut p = PromptReport::new("smol", "capital", path, 6);
    p.checks.put(PromptTokens {
        text_matches: true,
        n_ours: 6,
        n_reference: 6,
        first_difference: None,
        detail: None,
    });
    p.checks.put(taps(3, scale, ""));
    p.checks.put(logits(6, scale, &[]));
    p.checks.put(GreedyResult {
        reference_len: 4,
        compared: 4,
        agree: 4,
        outcome: Outcome::Agree,
        mismatch: None,
        ours: vec![1, 2, 3, 4],
    });
    p
}

/// Model "smol" on cpu (passes) and gpu (fails taps — a detail with
/// markup — and top-1 twice; against cpu it passes), its tokenizer corpus
/// (passes) and chat renders (fail); model "mamba", skipped.
pub fn report() -> Report {
    let cpu = prompt(Path::Cpu, 1e-6);
    let mut gpu = prompt(Path::Gpu, 1e-4);
    gpu.checks.put(taps(3, 2e-4, ""));
    gpu.checks.put(logits(6, 1e-4, &[2, 4, 5]));
    gpu.checks.put(CrossResult {
        against: Path::Cpu,
        taps: Some(taps(3, 1e-5, "cpu:")),
        logits: logits(6, 1e-5, &[]),
    });
    gpu.validation_messages = Some(0);
    gpu.failures = vec![
        Failure::new("taps", "first divergence: <Qcur> & \"more\""),
        Failure::new("top1", "3 positions"),
        Failure::new("top1", "first at 2"),
    ];
    let mut smol = ModelReport {
        id: "smol".into(),
        architecture: "llama".into(),
        file: "models/smol.gguf".into(),
        skipped: None,
        paths: vec![Path::Cpu, Path::Gpu],
        failures: vec![Failure::new("chat", "render 'a' differs at byte 3")],
        checks: Checks::default(),
        prompts: vec![cpu, gpu],
        text_seconds: 0.25,
        seconds: 1.5,
    };
    smol.checks.put(CorpusCheck {
        lines: 3,
        compared: 8,
        mismatches: Vec::new(),
    });
    smol.checks.put(ChatCheck {
        compared: 2,
        mismatches: vec![RenderMismatch {
            id: "a".into(),
            add_generation_prompt: true,
            first_difference: 3,
            detail: "x".into(),
        }],
    });
    smol.prompts[1].seconds = 0.5;
    let mamba = ModelReport {
        id: "mamba".into(),
        architecture: "mamba".into(),
        file: "models/mamba.gguf".into(),
        skipped: Some("architecture 'mamba' not implemented".into()),
        paths: Vec::new(),
        failures: Vec::new(),
        checks: Checks::default(),
        prompts: Vec::new(),
        text_seconds: 0.0,
        seconds: 0.0,
    };
    Report {
        reference_dir: "reference-data".into(),
        thresholds: "ci/thresholds.toml".into(),
        paths: crate::compare::Paths::List(vec![Path::Cpu, Path::Gpu]),
        provenance: Default::default(),
        shard: None,
        items: Vec::new(),
        ran: Vec::new(),
        models: vec![smol, mamba],
        baseline: None,
        seconds: 2.0,
    }
}
