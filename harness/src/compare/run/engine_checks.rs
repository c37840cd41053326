//! One prompt on one path: the engine on the captured ids, its taps,
//! logits and greedy continuation against llama.cpp's ([`engine_checks`])
//! and against the first path's outputs ([`cross_check`]).

use std::sync::Arc;

use engine::session::{Outputs, Session};

use crate::compare::checks::cross::{self, CrossResult, PathOutputs};
use crate::compare::checks::sink::TapSink;
use crate::compare::checks::split::{self, SplitResult};
use crate::compare::checks::thresholds::Limits;
use crate::compare::checks::Check;
use crate::compare::checks::{greedy, logits, taps};
use crate::compare::plan::Options;
use crate::compare::report::PromptReport;
use crate::compare::Failure;
use crate::reference::arrays::TopKTable;
use crate::reference::format::{Positions, PromptCapture};
use crate::reference::PromptData;

/// This path's outputs against the first path's: taps and logits, failures
/// under "vs".
pub(super) fn cross_check(
    base: &PathOutputs,
    ours: &PathOutputs,
    per_position: Vec<logits::PositionStat>,
    limits: &Limits,
    r: &mut PromptReport,
) -> CrossResult {
    let against = base.path;
    let taps = (!base.taps.is_empty())
        .then(|| cross::compare_taps(&base.taps, &ours.taps, against, limits));
    let logits = logits::summarize(&base.last, &ours.last, per_position, limits.near_tie);
    let v = CrossResult {
        against,
        taps,
        logits,
    };
    r.failures.extend(v.failures(limits));
    v
}

/// This hybrid path's taps up to its split against `base`'s (the `gpu`
/// path's), `n` the first layer on the CPU; failures under "split".
pub(super) fn split_check(
    base: &PathOutputs,
    ours: &PathOutputs,
    n: usize,
    limits: &Limits,
    r: &mut PromptReport,
) -> SplitResult {
    let s = split::compare(&base.taps, &ours.taps, base.path, n);
    r.failures.extend(s.failures(limits));
    s
}

/// Runs the engine on the captured ids and fills taps, logits and greedy.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
pub(super) fn engine_checks(
    opts: &Options,
    session: &mut Session,
    data: &PromptData,
    prompt: &PromptCapture,
    chunk: usize,
    limits: &Limits,
    r: &mut PromptReport,
    baseline: Option<&PathOutputs>,
) -> Result<(PathOutputs, Vec<logits::PositionStat>), String> {
    let ids: Vec<u32> = data
        .tokens()
        .iter()
        .map(|&t| u32::try_from(t).map_err(|_| format!("captured token id {t}")))
        .collect::<Result<_, _>>()?;
    let n = ids.len();
    if n == 0 {
        return Err("the capture has no prompt tokens".into());
    }
    let steps = data.greedy_tokens().len().min(opts.greedy_steps);
    if n + steps > session.n_ctx() {
        return Err(format!(
            "{n} prompt tokens and {steps} greedy steps exceed the session's context of {}",
            session.n_ctx()
        ));
    }
    let model = Arc::clone(session.model());
    let n_vocab = model.hparams().n_vocab;
    if n_vocab != data.last_logits().len() {
        return Err(format!(
            "{} logits per position, llama.cpp has {}",
            n_vocab,
            data.last_logits().len()
        ));
    }

    // Prompt: every position's distribution, the last one's logits, taps.
    let keep = match prompt.tap_positions {
        Positions::All => 0..n,
        Positions::Last => n - 1..n,
    };
    let mut sink = prompt.taps_recorded.then(|| TapSink::new(keep));
    let mut per_position = Vec::with_capacity(n);
    let mut cross_positions = Vec::new();
    let mut top = TopKTable::new(cross::TOP_K);
    // Kept by the first path only, when other paths compare with it.
    let keep_top = baseline.is_none() && opts.paths.several();
    let mut last = Vec::new();
    let chunk_len = chunk.max(1);
    for (c, chunk) in ids.chunks(chunk_len).enumerate() {
        let pos0 = c * chunk_len;
        if let Some(s) = sink.as_mut() {
            s.begin_chunk(pos0, chunk.len());
        }
        let tap = sink
            .as_mut()
            .map(|s| s as &mut dyn engine::trace::TraceSink);
        let all = session
            .forward(chunk, Outputs::All, tap)
            .map_err(|e| e.to_string())?;
        for (i, row) in all.chunks_exact(n_vocab).enumerate() {
            let p = pos0 + i;
            per_position.push(logits::position(data.position(p), row));
            if keep_top {
                top.push_logits(row);
            }
            if let Some(b) = baseline.filter(|b| p < b.top.rows()) {
                cross_positions.push(logits::position(b.top.row(p), row));
            }
            if p == n - 1 {
                last = row.to_vec();
            }
        }
    }

    // Taps.
    if let Some(sink) = &sink {
        let t = taps::compare(data, &sink.taps, limits);
        r.failures.extend(t.failures(limits));
        r.checks.put(t);
    }

    // Logits.
    let l = logits::summarize(data.last_logits(), &last, per_position, limits.near_tie);
    r.failures.extend(l.failures(limits));
    r.checks.put(l);

    // Greedy continuation, from the prompt's last logits. A failure here
    // (logits without a number, say) keeps the prompt's outputs: the
    // comparisons with other paths still see them.
    let g = greedy::run(
        data.greedy_tokens(),
        |i| data.greedy_step(i),
        &last,
        steps,
        limits.near_tie,
        |t| {
            session
                .decode(t)
                .map(|l| l.to_vec())
                .map_err(|e| e.to_string())
        },
    );
    match g {
        Ok(g) => {
            r.failures.extend(g.failures(limits));
            r.checks.put(g);
        }
        Err(e) => r.failures.push(Failure::new("engine", e)),
    }
    let taps = sink.map(|s| s.taps).unwrap_or_default();
    Ok((
        PathOutputs {
            path: r.path,
            taps,
            top,
            last,
        },
        cross_positions,
    ))
}
