//! One prompt on one path: the engine on the captured ids, its taps,
//! logits and greedy continuation against llama.cpp's ([`engine_checks`])
//! and against the first path's outputs ([`cross_check`]).

use std::sync::Arc;

use engine::session::{Outputs, Session};

use crate::compare::checks::cross::{self, CrossResult, PathOutputs};
use crate::compare::checks::sink::TapSink;
use crate::compare::checks::split::{self, SplitResult};
use crate::compare::checks::thresholds::Limits;
use crate::compare::checks::{greedy, logits, taps};
use crate::compare::plan::Options;
use crate::compare::report::PromptReport;
use crate::compare::{within, Failure};
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
    if let Some(d) = taps.as_ref().and_then(|t| t.first_divergence.as_ref()) {
        r.failures.push(Failure::new(
            "vs",
            format!(
                "against {against}: first divergence: layer {} {}: NMSE {:.3e} > {:.1e}",
                d.layer.map_or("-".to_string(), |l| l.to_string()),
                d.name,
                d.nmse,
                d.limit
            ),
        ));
    }
    let l = logits::summarize(&base.last, &ours.last, per_position, limits.near_tie);
    let mut fail = |what: String| {
        r.failures
            .push(Failure::new("vs", format!("against {against}: {what}")))
    };
    if !within(l.nmse, limits.logits_nmse) {
        fail(format!(
            "last-position logits NMSE {:.3e} > {:.1e}",
            l.nmse, limits.logits_nmse
        ));
    }
    if !within(l.kld.mean, limits.kld_mean) {
        fail(format!(
            "mean KLD {:.3e} > {:.1e}",
            l.kld.mean, limits.kld_mean
        ));
    }
    if !within(l.kld.max, limits.kld_max) {
        fail(format!(
            "max KLD {:.3e} > {:.1e}",
            l.kld.max, limits.kld_max
        ));
    }
    if l.top1_rate() < limits.top1_min {
        fail(format!(
            "top-1 agreement {}/{} < {:.1}%",
            l.top1_agree,
            l.positions,
            100.0 * limits.top1_min
        ));
    }
    if l.top1_hard > 0 {
        fail(format!(
            "{} position(s) disagree on the most likely token beyond the near-tie margin",
            l.top1_hard
        ));
    }
    CrossResult {
        against,
        taps,
        logits: l,
    }
}

/// This hybrid path's taps up to its split against `base`'s (the `gpu`
/// path's), `n` the first layer on the CPU; failures under "split".
pub(super) fn split_check(
    base: &PathOutputs,
    ours: &PathOutputs,
    n: usize,
    r: &mut PromptReport,
) -> SplitResult {
    let s = split::compare(&base.taps, &ours.taps, base.path, n);
    if let Some(d) = &s.taps.first_divergence {
        r.failures.push(Failure::new(
            "split",
            format!(
                "against {} up to layer {n}'s attn_norm (the first tap after the hand-off): first divergence: layer {} {}: NMSE {:.3e} > {:.1e}",
                base.path,
                d.layer.map_or("-".to_string(), |l| l.to_string()),
                d.name,
                d.nmse,
                d.limit
            ),
        ));
    }
    if !s.taps.unmatched.is_empty() {
        r.failures.push(Failure::new(
            "split",
            format!("not comparable: {}", s.taps.unmatched.join("; ")),
        ));
    }
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
        if let Some(d) = &t.first_divergence {
            r.failures.push(Failure::new(
                "taps",
                format!(
                    "first divergence: layer {} {} (llama.cpp {} {}): NMSE {:.3e} > {:.1e}; {} of {} taps over their limits",
                    d.layer.map_or("-".to_string(), |l| l.to_string()),
                    d.name,
                    d.reference,
                    d.op,
                    d.nmse,
                    d.limit,
                    t.failed(),
                    t.rows.len()
                ),
            ));
        }
        if !t.unmatched.is_empty() {
            r.failures.push(Failure::new(
                "taps",
                format!("not comparable: {}", t.unmatched.join("; ")),
            ));
        }
        r.taps = Some(t);
    }

    // Logits.
    let l = logits::summarize(data.last_logits(), &last, per_position, limits.near_tie);
    if !within(l.nmse, limits.logits_nmse) {
        r.failures.push(Failure::new(
            "logits_nmse",
            format!(
                "last-position logits NMSE {:.3e} > {:.1e}",
                l.nmse, limits.logits_nmse
            ),
        ));
    }
    if limits.exact {
        if let Some(pos) = l.per_position.iter().position(|p| !p.identical) {
            let n = l.per_position.iter().filter(|p| !p.identical).count();
            r.failures.push(Failure::new(
                "logits",
                format!(
                    "{n} of {} positions' top-64 logits differ from llama.cpp's (exact profile); first: position {pos}",
                    l.positions
                ),
            ));
        }
    }
    if !within(l.kld.mean, limits.kld_mean) {
        r.failures.push(Failure::new(
            "kld_mean",
            format!("mean KLD {:.3e} > {:.1e}", l.kld.mean, limits.kld_mean),
        ));
    }
    if !within(l.kld.max, limits.kld_max) {
        let worst = l.per_position.iter().position(|p| p.kld == l.kld.max);
        r.failures.push(Failure::new(
            "kld_max",
            format!(
                "max KLD {:.3e} > {:.1e} (position {})",
                l.kld.max,
                limits.kld_max,
                worst.map_or("?".into(), |p| p.to_string())
            ),
        ));
    }
    if l.top1_rate() < limits.top1_min {
        r.failures.push(Failure::new(
            "top1",
            format!(
                "top-1 agreement {}/{} ({:.1}%) < {:.1}%",
                l.top1_agree,
                l.positions,
                100.0 * l.top1_rate(),
                100.0 * limits.top1_min
            ),
        ));
    }
    if let Some((pos, p)) = l
        .per_position
        .iter()
        .enumerate()
        .find(|(_, p)| p.hard_disagreement(limits.near_tie))
    {
        r.failures.push(Failure::new(
            "top1",
            format!(
                "{} position(s) where our most likely token is not llama.cpp's and not a near-tie; first: position {pos}, llama.cpp's margin to ours {} >= {}",
                l.top1_hard,
                p.margin_to_ours
                    .map_or("(not in its top-64)".to_string(), |m| format!("{m:.3}")),
                limits.near_tie
            ),
        ));
    }
    r.logits = Some(l);

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
        Ok(g) => greedy_failure(g, limits, r),
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

/// Records greedy result `g`, and its failure if it diverged beyond a
/// near-tie.
fn greedy_failure(g: greedy::GreedyResult, limits: &Limits, r: &mut PromptReport) {
    if g.outcome == greedy::Outcome::Diverged {
        let m = g.mismatch.as_ref().expect("a divergence has a mismatch");
        r.failures.push(Failure::new(
            "greedy",
            format!(
                "step {}: ours {} llama.cpp {}, llama.cpp's margin to ours {} (top-2 {:.3}) >= near-tie {}",
                m.step,
                m.ours,
                m.reference,
                m.reference_margin_to_ours
                    .map_or("(not in its top-64)".to_string(), |x| format!("{x:.3}")),
                m.reference_top2_margin,
                limits.near_tie
            ),
        ));
    }
    r.greedy = Some(g);
}
