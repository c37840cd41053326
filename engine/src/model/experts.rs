//! The data of a mixture-of-experts layer's expert products: its stacked
//! expert matrices and the buffers one call works on. What computes them
//! is [`super::moe::experts`] where the layer's experts live, or the
//! layer's [`super::ExpertRunner`] (an expert slot cache).

use crate::ops::{Act, GluKind, Weight};

/// The stacked expert matrices of one layer.
#[derive(Clone, Copy, Debug)]
pub struct ExpertWeights {
    /// `[n_embd, n_ff_exp, n_expert]`
    pub gate: Weight,
    /// `[n_embd, n_ff_exp, n_expert]`
    pub up: Weight,
    /// `[n_ff_exp, n_embd, n_expert]`
    pub down: Weight,
}

/// The expert part of a layer: `ids`, `xb` in; `up`, `gate` scratch;
/// `out` the experts' outputs before weighting.
#[derive(Clone, Copy, Debug)]
pub struct Experts {
    /// `None`: held by the layer's [`super::ExpertRunner`].
    pub w: Option<ExpertWeights>,
    pub n_expert: usize,
    pub kind: GluKind,
    /// `[n, k]` expert ids (as f32)
    pub ids: Act,
    /// `[n, n_embd]`
    pub xb: Act,
    /// `[n, k · n_ff_exp]`
    pub up: Act,
    /// `[n, k · n_ff_exp]`, the activation after the GLU
    pub gate: Act,
    /// `[n, k · n_embd]`
    pub out: Act,
}
