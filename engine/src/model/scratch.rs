//! The per-device activation buffers of a forward pass, allocated once.

use std::collections::HashMap;

use crate::ops::{Act, BackendError};
use crate::placement::Devices;

use super::hparams::Hparams;

/// The buffers one device needs to run any layer, each with room for a
/// whole batch of `n_batch` rows. A forward pass narrows them to the
/// batch's rows with [`Scratch::first`].
#[derive(Clone, Copy, Debug)]
pub struct Scratch {
    /// `[n_batch, n_embd]`: normed block input (attn_norm, ffn_norm).
    pub xb: Act,
    /// `[n_batch, n_head · head_dim_k]`: Q.
    pub q: Act,
    /// `[n_batch, n_kv_head · head_dim_k]`: K of this batch.
    pub k: Act,
    /// `[n_batch, n_kv_head · head_dim_v]`: V of this batch.
    pub v: Act,
    /// `[n_batch, n_head · head_dim_v]`: attention output (kqv_out).
    pub att: Act,
    /// `[n_batch, n_embd]`: attention or FFN output projection.
    pub proj: Act,
    /// `[n_batch, ffn_width]`: FFN gate, then the gated activation (with
    /// experts: `k` slots of `n_ff_exp`, see [`Hparams::ffn_width`]).
    pub gate: Act,
    /// `[n_batch, ffn_width]`: FFN up projection.
    pub up: Act,
    /// The routing and expert outputs, for a mixture of experts.
    pub moe: Option<MoeScratch>,
}

/// A mixture of experts' buffers.
#[derive(Clone, Copy, Debug)]
pub struct MoeScratch {
    /// `[n_batch, n_expert]`: router logits, then probabilities.
    pub probs: Act,
    /// `[n_batch, k]`: chosen experts (as f32).
    pub ids: Act,
    /// `[n_batch, k]`: their weights.
    pub weights: Act,
    /// `[n_batch, k · n_embd]`: each chosen expert's output.
    pub experts: Act,
}

impl Scratch {
    /// Every buffer's name and width (each is `[n_batch, width]`), in the
    /// order [`Scratch::alloc`] allocates them: what a device needs to run
    /// any layer of a model with `hp`, and what the setup's sizing counts.
    pub fn widths(hp: &Hparams) -> Vec<(&'static str, usize)> {
        let mut w = Vec::with_capacity(12);
        if let Some(m) = hp.moe {
            w.extend([
                ("probs", m.n_expert),
                ("ids", m.n_used),
                ("weights", m.n_used),
                ("experts", m.n_used * hp.n_embd),
            ]);
        }
        w.extend([
            ("xb", hp.n_embd),
            ("q", hp.q_width()),
            ("k", hp.k_width()),
            ("v", hp.v_width()),
            ("att", hp.attn_out_width()),
            ("proj", hp.n_embd),
            ("gate", hp.ffn_width()),
            ("up", hp.ffn_width()),
        ]);
        w
    }

    /// Allocates the buffers of [`Scratch::widths`] on device `dev`.
    pub fn alloc(
        devices: &mut Devices,
        dev: usize,
        hp: &Hparams,
        n_batch: usize,
    ) -> Result<Scratch, BackendError> {
        let mut bufs = HashMap::new();
        for (name, width) in Scratch::widths(hp) {
            bufs.insert(name, devices.alloc(dev, n_batch, width)?);
        }
        let b = |name: &str| bufs[name];
        Ok(Scratch {
            xb: b("xb"),
            q: b("q"),
            k: b("k"),
            v: b("v"),
            att: b("att"),
            proj: b("proj"),
            gate: b("gate"),
            up: b("up"),
            moe: hp.moe.map(|_| MoeScratch {
                probs: b("probs"),
                ids: b("ids"),
                weights: b("weights"),
                experts: b("experts"),
            }),
        })
    }

    /// Every buffer narrowed to its first `n` rows.
    pub fn first(&self, n: usize) -> Scratch {
        Scratch {
            xb: self.xb.first(n),
            q: self.q.first(n),
            k: self.k.first(n),
            v: self.v.first(n),
            att: self.att.first(n),
            proj: self.proj.first(n),
            gate: self.gate.first(n),
            up: self.up.first(n),
            moe: self.moe.map(|m| MoeScratch {
                probs: m.probs.first(n),
                ids: m.ids.first(n),
                weights: m.weights.first(n),
                experts: m.experts.first(n),
            }),
        }
    }
}
