//! The feed-forward half of a block: dense gated (SwiGLU / GeGLU) or a
//! mixture of experts ([`crate::model::moe`]).

use crate::model::hparams::MoeParams;
use crate::model::moe::{self, MoeWeights};
use crate::model::spec::Role;
use crate::model::{Cx, RoleMap, Scratch};
use crate::ops::{Act, BackendError, GluKind, Weight};

/// One block's feed-forward weights.
pub enum Ffn {
    Dense {
        /// `[n_embd, n_ff]`
        gate: Weight,
        /// `[n_embd, n_ff]`
        up: Weight,
        /// `[n_ff, n_embd]`
        down: Weight,
    },
    Moe(MoeWeights, MoeParams),
}

impl Ffn {
    /// The dense weights, or the experts when the model has `moe`.
    pub fn new(t: &RoleMap<Weight>, moe: Option<MoeParams>) -> Ffn {
        match moe {
            None => Ffn::Dense {
                gate: t.get(Role::FfnGate),
                up: t.get(Role::FfnUp),
                down: t.get(Role::FfnDown),
            },
            Some(p) => Ffn::Moe(MoeWeights::new(t), p),
        }
    }
}

/// llama.cpp's name for the gated activation's output.
pub fn glu_tap(kind: GluKind) -> &'static str {
    match kind {
        GluKind::SwiGlu => "ffn_swiglu",
        GluKind::GeGluTanh => "ffn_geglu",
    }
}

/// `out = ffn(xb)` (`xb`, `out` `[n, n_embd]`), on `s.gate` / `s.up`. Taps
/// `ffn_up`, `ffn_gate`, the activation, `ffn_out` (dense) or the
/// `ffn_moe_*` tensors.
pub fn run(
    cx: &mut Cx<'_, '_>,
    ffn: &Ffn,
    kind: GluKind,
    xb: Act,
    s: &Scratch,
    out: Act,
) -> Result<(), BackendError> {
    match ffn {
        Ffn::Dense { gate, up, down } => {
            cx.matmul(*up, xb, s.up);
            cx.tap("ffn_up", s.up)?;
            cx.matmul(*gate, xb, s.gate);
            cx.tap("ffn_gate", s.gate)?;
            cx.glu(kind, s.gate, s.up);
            cx.tap(glu_tap(kind), s.gate)?;
            cx.matmul(*down, s.gate, out);
            cx.tap("ffn_out", out)
        }
        Ffn::Moe(w, p) => moe::run(cx, w, p, kind, xb, s, out),
    }
}
