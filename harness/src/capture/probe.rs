//! The graph probe: three decodes that read no data tell which named
//! tensors the graph has, their token and KV dimensions, the norms stored
//! by their weighted product and the taps rebuilt from their operands.

use std::collections::{BTreeMap, HashMap};

use super::llama::{Context, ContextSettings, Model};
use super::taps::{self, NodeSeen, TapRecorder};
use super::{decode, err, CaptureError};
use crate::reference::format::{elementwise_op, TapInfo};

/// Learns the named graph tensors and their token and KV dimensions from
/// three decodes that read no data: 2 tokens, then 1 more in the same
/// context, then 257 tokens in a fresh one (KV length 512 instead of 256).
pub(super) fn probe_graph(
    model: &Model,
    s: ContextSettings,
    tokens: &[i32],
) -> Result<Vec<TapInfo>, CaptureError> {
    let mut rec = TapRecorder::shapes(false);
    let mut ctx = Context::new(model, s, Some(&mut rec))?;
    decode(&mut ctx, &tokens[..2], 0)?;
    let two = std::mem::take(&mut ctx.recorder().expect("attached").seen);
    decode(&mut ctx, &tokens[2..3], 2)?;
    let one = std::mem::take(&mut ctx.recorder().expect("attached").seen);
    drop(ctx);
    let mut ctx = Context::new(model, s, Some(&mut rec))?;
    decode(&mut ctx, tokens, 0)?;
    let long = std::mem::take(&mut ctx.recorder().expect("attached").seen);
    drop(ctx);
    catalog_from_probes(&two, &one, &long, tokens.len(), model.n_vocab())
}

/// Builds the tap catalog: the same keys, ops and types, in the same order,
/// in the three probes; the token dimension is the one that is 2, 1 and
/// `long_tokens`; the KV dimension the other one that changes.
fn catalog_from_probes(
    two: &[NodeSeen],
    one: &[NodeSeen],
    long: &[NodeSeen],
    long_tokens: usize,
    n_vocab: usize,
) -> Result<Vec<TapInfo>, CaptureError> {
    if two.is_empty() {
        return err("the graph has no named tensors");
    }
    for (what, other) in [("1-token", one), ("long", long)] {
        if let Some(i) = (0..two.len().max(other.len())).find(|&i| {
            let (a, b) = (two.get(i), other.get(i));
            a.map(|n| (&n.key, &n.op, &n.ggml_type)) != b.map(|n| (&n.key, &n.op, &n.ggml_type))
        }) {
            return err(format!(
                "the graph changes with the batch: node {i} is {:?} with 2 tokens, {:?} in the {what} probe",
                two.get(i).map(|n| (&n.key, &n.op)),
                other.get(i).map(|n| (&n.key, &n.op))
            ));
        }
    }
    let weighted = weighted_norms(two);
    for (what, other) in [("1-token", one), ("long", long)] {
        if weighted_norms(other) != weighted {
            return err(format!(
                "the graph changes with the batch: norms and their weighted taps differ in the {what} probe"
            ));
        }
    }
    let mut catalog = Vec::with_capacity(two.len());
    for (i, ((a, b), c)) in two.iter().zip(one).zip(long).enumerate() {
        let token: Vec<usize> = (0..4)
            .filter(|&d| a.ne[d] == 2 && b.ne[d] == 1 && c.ne[d] == long_tokens as u64)
            .collect();
        if token.len() > 1 {
            return err(format!("{}: several token dimensions {token:?}", a.key));
        }
        let token_dim = token.first().copied();
        let varying: Vec<usize> = (0..4)
            .filter(|&d| Some(d) != token_dim && (a.ne[d] != b.ne[d] || a.ne[d] != c.ne[d]))
            .collect();
        if varying.len() > 1 {
            return err(format!(
                "{}: shapes {:?} / {:?} / {:?} vary in more than one non-token dimension",
                a.key, a.ne, b.ne, c.ne
            ));
        }
        let (base, layer) = taps::split_layer(&a.name);
        catalog.push(TapInfo {
            key: a.key.clone(),
            name: a.name.clone(),
            base: base.to_string(),
            layer,
            op: a.op.clone(),
            occurrence: a.occurrence,
            ggml_type: a.ggml_type.clone(),
            token_dim,
            kv_dim: varying.first().copied(),
            vocab_rows: token_dim.is_some() && b.ne.iter().product::<u64>() == n_vocab as u64,
            ne_one_token: b.ne,
            weighted_tap: weighted.get(&i).map(|&j| two[j].key.clone()),
            derived_from: None,
        });
    }
    set_derived(&mut catalog, two);
    Ok(catalog)
}

/// Marks the taps that are an elementwise ADD, SUB, MUL or DIV of two
/// recorded taps of their own shape (`TapInfo::derived_from`): candidates
/// for not being stored, if the capture finds them exact.
fn set_derived(catalog: &mut [TapInfo], nodes: &[NodeSeen]) {
    let index: HashMap<usize, usize> = nodes.iter().enumerate().map(|(i, n)| (n.addr, i)).collect();
    for i in 0..catalog.len() {
        if elementwise_op(&catalog[i].op).is_none() || nodes[i].srcs.len() != 2 {
            continue;
        }
        let operands: Vec<usize> = nodes[i]
            .srcs
            .iter()
            .filter_map(|(addr, _)| index.get(addr).copied())
            .collect();
        let t = &catalog[i];
        let same = |o: &TapInfo| {
            o.is_recorded()
                && !o.vocab_rows
                && o.ne_one_token == t.ne_one_token
                && o.token_dim == t.token_dim
                && o.kv_dim == t.kv_dim
        };
        if let [a, b] = operands[..] {
            if a < i && b < i && same(&catalog[a]) && same(&catalog[b]) {
                catalog[i].derived_from = Some([catalog[a].key.clone(), catalog[b].key.clone()]);
            }
        }
    }
}

/// The unweighted norms among the named nodes and the named node that
/// weights each (index -> index): an RMS_NORM or NORM node whose output a
/// later named MUL multiplies by a leaf (a weight). llama.cpp's build_norm
/// names the first `norm` and the caller names the product (`attn_norm`,
/// `ffn_norm`, `Qcur_normed`, `result_norm`, ...).
fn weighted_norms(nodes: &[NodeSeen]) -> BTreeMap<usize, usize> {
    let mut out = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if n.op != "RMS_NORM" && n.op != "NORM" {
            continue;
        }
        let by_weight = nodes.iter().enumerate().skip(i + 1).find(|(_, m)| {
            m.op == "MUL"
                && m.srcs.len() == 2
                && m.srcs.iter().any(|s| s.0 == n.addr)
                && m.srcs.iter().any(|s| s.0 != n.addr && s.1 == "NONE")
        });
        if let Some((j, _)) = by_weight {
            out.insert(i, j);
        }
    }
    out
}
