//! One prompt on one model: the plain decode (logits at every position,
//! then the greedy continuation) and the tap decode (every named graph
//! tensor), with the prompt's summary for capture.json.

use std::collections::{BTreeMap, HashMap};

use indicatif::ProgressBar;

use super::llama::{Context, ContextSettings, Model};
use super::taps::{TapPlan, TapRecorder};
use super::{decode, err, CaptureError, PromptRun};
use crate::metrics::max_abs_diff;
use crate::reference::arrays::{PromptArrays, Tap, TopKTable};
use crate::reference::format::{
    elementwise_op, CaptureConfig, GreedyStop, GreedySummary, Positions, PromptCapture, TapInfo,
};
use crate::reference::writer::{self, sha256_hex};

/// Index of the largest logit (the lowest such index on ties).
fn argmax(logits: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as i32
}

fn finite_or_err(logits: &[f32], what: &str) -> Result<(), CaptureError> {
    if logits.iter().any(|v| v.is_nan()) {
        return err(format!("NaN in the logits of {what}"));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(super) fn capture_prompt(
    model: &Model,
    s: ContextSettings,
    cfg: &CaptureConfig,
    run: &PromptRun,
    catalog: &[TapInfo],
    all_positions: bool,
    record_taps: bool,
    bar: &ProgressBar,
) -> Result<(PromptArrays, PromptCapture), CaptureError> {
    let t = run.tokens.len();
    let pid = &run.source.id;

    // 1. The plain run: logits at every position, then greedy steps.
    let mut positions = TopKTable::new(cfg.top_k);
    let mut greedy = TopKTable::new(cfg.top_k);
    let mut greedy_tokens = Vec::new();
    let mut stop = GreedyStop::Length;
    let last_logits = {
        let mut ctx = Context::new(model, s, None)?;
        decode(&mut ctx, &run.tokens, 0)?;
        for i in 0..t {
            let l = ctx.logits(i)?;
            finite_or_err(l, &format!("{pid} position {i}"))?;
            positions.push_logits(l);
        }
        let last = ctx.logits(t - 1)?.to_vec();
        bar.inc(1);
        let mut cur = last.clone();
        for step in 0..cfg.greedy_steps {
            greedy.push_logits(&cur);
            let next = argmax(&cur);
            greedy_tokens.push(next);
            bar.inc(1);
            if model.is_eog(next) {
                stop = GreedyStop::EndOfGeneration;
                bar.inc((cfg.greedy_steps - step - 1) as u64);
                break;
            }
            if step + 1 == cfg.greedy_steps {
                break;
            }
            decode(&mut ctx, &[next], t + step)?;
            cur = ctx.logits(0)?.to_vec();
            finite_or_err(&cur, &format!("{pid} greedy step {}", step + 1))?;
        }
        last
    };

    // 2. The tap run: the same prompt, every named graph tensor recorded.
    let tapped = if record_taps {
        Some(capture_taps(
            model,
            s,
            run,
            catalog,
            all_positions,
            &last_logits,
        )?)
    } else {
        None
    };
    if let Some(x) = tapped.as_ref().filter(|x| !x.inexact.is_empty()) {
        bar.println(format!(
            "capture: warning: {pid}: {} taps are not exactly their op on their operands, stored: {}",
            x.inexact.len(),
            x.inexact.join(", ")
        ));
    }
    bar.inc(1);

    let first = positions.row(t - 1);
    let first_token_margin = match first.values {
        [a, b, ..] => a - b,
        _ => return err(format!("{pid}: top_k must be at least 2")),
    };
    let bytes = model.detokenize(&greedy_tokens);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let text_hex = std::str::from_utf8(&bytes)
        .is_err()
        .then(|| writer::hex(&bytes));
    let summary = PromptCapture {
        id: pid.clone(),
        kind: run.source.kind,
        add_special: run.add_special,
        parse_special: run.parse_special,
        text_sha256: sha256_hex(run.text.as_bytes()),
        n_tokens: t,
        n_kv: tapped.as_ref().and_then(|x| x.n_kv),
        kv_len: tapped.as_ref().and_then(|x| x.n_kv.map(|_| t as u64)),
        file: String::new(),
        taps_recorded: tapped.is_some(),
        tap_positions: if all_positions {
            Positions::All
        } else {
            Positions::Last
        },
        greedy: GreedySummary {
            n_tokens: greedy_tokens.len(),
            stop,
            text,
            text_hex,
        },
        first_token_margin,
        tap_run_logits_max_abs_diff: tapped.as_ref().map_or(0.0, |x| x.logits_max_abs_diff),
        tap_aliases: tapped
            .as_ref()
            .map(|x| x.aliases.clone())
            .unwrap_or_default(),
    };
    let arrays = PromptArrays {
        tokens: run.tokens.clone(),
        positions,
        last_logits,
        greedy_tokens,
        greedy,
        taps: tapped.map(|x| x.taps).unwrap_or_default(),
    };
    Ok((arrays, summary))
}

/// What the tap run of one prompt produced.
struct Tapped {
    taps: BTreeMap<String, Tap>,
    aliases: BTreeMap<String, String>,
    inexact: Vec<String>,
    n_kv: Option<u64>,
    logits_max_abs_diff: f32,
}

/// Decodes the prompt again with every catalog tensor recorded; checks
/// shapes and types against the catalog, drops the KV padding cells (after
/// checking they are 0) and replaces taps equal to another array by
/// aliases.
fn capture_taps(
    model: &Model,
    s: ContextSettings,
    run: &PromptRun,
    catalog: &[TapInfo],
    all_positions: bool,
    last_logits: &[f32],
) -> Result<Tapped, CaptureError> {
    let t = run.tokens.len();
    let pid = &run.source.id;
    let plan: HashMap<String, TapPlan> = catalog
        .iter()
        .map(|ti| {
            let plan = TapPlan {
                token_dim: ti.token_dim,
                last_only: !all_positions || ti.vocab_rows,
            };
            (ti.key.clone(), plan)
        })
        .collect();
    let mut rec = TapRecorder::capture(plan);
    let tap_logits = {
        let mut ctx = Context::new(model, s, Some(&mut rec))?;
        decode(&mut ctx, &run.tokens, 0)?;
        ctx.logits(t - 1)?.to_vec()
    };
    let mut captured = std::mem::take(&mut rec.captured);
    let mut n_kv: Option<u64> = None;
    let mut taps: BTreeMap<String, Tap> = BTreeMap::new();
    let mut aliases = BTreeMap::new();
    // Stored taps by content, to alias later equal ones.
    let mut by_bits: HashMap<Vec<u32>, String> = HashMap::new();
    by_bits.insert(bits(last_logits), "logits/last".to_string());
    // Every recorded tap's values, the operands of derived taps.
    let mut values: HashMap<String, Tap> = HashMap::new();
    // Derived taps whose values are not their op on their operands' (stored).
    let mut inexact = Vec::new();
    for info in catalog {
        let (ty, mut tap) = captured.remove(&info.key).ok_or_else(|| {
            CaptureError(format!(
                "{pid}: graph tensor {} was not delivered",
                info.key
            ))
        })?;
        if ty != info.ggml_type {
            return err(format!(
                "{pid}: {} is {ty}, the probe saw {}",
                info.key, info.ggml_type
            ));
        }
        if let Some(d) = info.kv_dim {
            let nk = tap.ne[d] as u64;
            if *n_kv.get_or_insert(nk) != nk {
                return err(format!(
                    "{pid}: {} has KV length {nk}, other taps {n_kv:?}",
                    info.key
                ));
            }
            if tap.ne[d] < t {
                return err(format!(
                    "{pid}: {} has KV length {nk} < {t} tokens",
                    info.key
                ));
            }
            let pad = tap.narrow(d, t, tap.ne[d] - t);
            if let Some(v) = pad.data.iter().find(|v| **v != 0.0) {
                return err(format!(
                    "{pid}: {}: a KV padding cell holds {v}, not 0",
                    info.key
                ));
            }
            tap = tap.narrow(d, 0, t);
        }
        let mut expected = info.ne_one_token.map(|n| n as usize);
        if let Some(d) = info.token_dim {
            expected[d] = if all_positions && !info.vocab_rows {
                t
            } else {
                1
            };
        }
        if let Some(d) = info.kv_dim {
            expected[d] = t;
        }
        if tap.ne != expected {
            return err(format!(
                "{pid}: {} has shape {:?}, expected {expected:?}",
                info.key, tap.ne
            ));
        }
        if !info.is_recorded() {
            // Recorded by its weighted tap (still read, so that the graph
            // is split at the same nodes whatever the catalog stores).
            continue;
        }
        if let Some([a, b]) = &info.derived_from {
            let f = elementwise_op(&info.op).expect("set_derived checked the op");
            let (a, b) = (&values[a], &values[b]);
            let exact = a.ne == tap.ne
                && b.ne == tap.ne
                && a.data
                    .iter()
                    .zip(&b.data)
                    .zip(&tap.data)
                    .all(|((x, y), z)| f(*x, *y).to_bits() == z.to_bits());
            if exact {
                values.insert(info.key.clone(), tap);
                continue;
            }
            inexact.push(info.key.clone());
        }
        values.insert(info.key.clone(), tap.clone());
        let key_bits = bits(&tap.data);
        match by_bits.get(&key_bits) {
            Some(target) => {
                aliases.insert(info.key.clone(), target.clone());
            }
            None => {
                by_bits.insert(key_bits, format!("tap/{}", info.key));
                taps.insert(info.key.clone(), tap);
            }
        }
    }
    if let Some(key) = captured.keys().next() {
        return err(format!("{pid}: unexpected graph tensor {key}"));
    }
    Ok(Tapped {
        taps,
        aliases,
        inexact,
        n_kv,
        logits_max_abs_diff: max_abs_diff(&tap_logits, last_logits) as f32,
    })
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
