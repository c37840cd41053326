//! What one forward pass works with: the devices, their scratch buffers,
//! the logits buffer, and the trace sink; and [`Cx`], the ops of one stage
//! with the tap hook.

use std::ops::{Deref, DerefMut};

use super::scratch::Scratch;
use crate::ops::{Act, BackendError, GluKind, Ops, Weight};
use crate::placement::{Devices, Stage};
use crate::trace::TraceSink;

/// The state a forward pass borrows from its session.
pub struct Step<'a> {
    devices: &'a mut Devices,
    /// `scratch[d]`: device `d`'s buffers, when `d` runs any stage.
    scratch: &'a [Option<Scratch>],
    /// `[HEAD_BLOCK, n_vocab]` on the head's device.
    logits: Act,
    sink: Option<&'a mut dyn TraceSink>,
    /// `experts[l]`: what runs layer `l`'s experts when they are not on
    /// its device (an expert slot cache); empty when no layer has one.
    experts: Vec<Option<&'a mut dyn ExpertRunner>>,
}

impl<'a> Step<'a> {
    /// A pass over `devices` with their `scratch`, the head's `logits`
    /// buffer, the trace `sink`, and the layers' lent `experts` runners.
    pub fn new(
        devices: &'a mut Devices,
        scratch: &'a [Option<Scratch>],
        logits: Act,
        sink: Option<&'a mut dyn TraceSink>,
        experts: Vec<Option<&'a mut dyn ExpertRunner>>,
    ) -> Step<'a> {
        Step {
            devices,
            scratch,
            logits,
            sink,
            experts,
        }
    }

    /// The first `rows` rows of the hidden-state buffer where `stage` runs.
    pub fn hidden(&self, stage: Stage, rows: usize) -> Act {
        self.devices.hidden(stage, rows)
    }

    /// The scratch buffers of `stage`'s device, narrowed to `rows` rows.
    pub fn scratch(&self, stage: Stage, rows: usize) -> Scratch {
        let d = self.devices.device_of(stage);
        self.scratch[d]
            .as_ref()
            .unwrap_or_else(|| panic!("no scratch on device {d}"))
            .first(rows)
    }

    /// The logits buffer of the head's device.
    pub fn logits(&self) -> Act {
        self.logits
    }

    /// The hidden state `x`, made available where `to` runs: see
    /// [`Devices::handoff`], the only place it crosses devices.
    pub fn handoff(&mut self, x: Act, to: Stage) -> Result<Act, BackendError> {
        self.devices.handoff(x, to)
    }

    /// The ops of the device that runs `stage`, tapping under `stage`'s
    /// layer number (none for the embedding and the head), with the
    /// layer's [`ExpertRunner`] when it has one.
    pub fn at(&mut self, stage: Stage) -> Cx<'_, 'a> {
        let layer = match stage {
            Stage::Layer(l) => Some(l),
            Stage::Embed | Stage::Head => None,
        };
        let runner = layer.and_then(|l| self.experts.get_mut(l)?.as_deref_mut());
        Cx {
            ops: self.devices.at(stage),
            runner,
            sink: self.sink.as_deref_mut(),
            layer,
        }
    }
}

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
    /// `None`: held by the layer's [`ExpertRunner`].
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

/// What computes the expert products of a layer whose experts are not
/// (all) where the layer runs: the expert slot cache of `--moe-cache`,
/// owned by the session and lent to the forward pass ([`Step`]).
/// [`Cx::run_experts`] hands it the layer's [`Experts`] in place of
/// [`super::moe::experts`].
pub trait ExpertRunner: Send {
    /// The expert products of `e` into `e.out` (`[n, k · n_embd]`, before
    /// weighting), tapping `ffn_moe_up`, `ffn_moe_gate`, the activation and
    /// `ffn_moe_down` as [`super::moe::experts`] does.
    fn run(&mut self, cx: &mut Cx<'_, '_>, e: &Experts) -> Result<(), BackendError>;
}

/// One stage's ops (through `Deref` to [`Ops`]) and its tap hook.
pub struct Cx<'s, 'a> {
    ops: &'s mut dyn Ops,
    /// What runs the layer's experts when they are not here (an expert
    /// slot cache, `--moe-cache`), if anything.
    runner: Option<&'s mut (dyn ExpertRunner + 'a)>,
    sink: Option<&'s mut (dyn TraceSink + 'a)>,
    layer: Option<usize>,
}

impl Cx<'_, '_> {
    /// The expert products of a mixture-of-experts layer by the layer's
    /// [`ExpertRunner`] when it has one (an expert slot cache: the cached
    /// experts here, the others on the host), the one place a layer's
    /// experts may run on two devices; `None`, running nothing, when the
    /// experts are all here ([`super::moe::experts`] runs them).
    pub fn run_experts(&mut self, e: &Experts) -> Option<Result<(), BackendError>> {
        let r = self.runner.take()?;
        let out = r.run(self, e);
        self.runner = Some(r);
        Some(out)
    }

    /// Whether the sink wants `name` at this layer.
    pub fn wants(&self, name: &str) -> bool {
        self.sink
            .as_deref()
            .is_some_and(|s| s.wants(name, self.layer))
    }

    /// Hands `x` to the sink as `name` (llama.cpp's spelling). Without a
    /// sink, or when the sink does not want it, nothing is read back.
    pub fn tap(&mut self, name: &str, x: Act) -> Result<(), BackendError> {
        let Some(sink) = self.sink.as_deref_mut() else {
            return Ok(());
        };
        if !sink.wants(name, self.layer) {
            return Ok(());
        }
        let mut host = vec![0.0; x.len()];
        self.ops.read(x, &mut host)?;
        sink.record(name, self.layer, [x.rows(), x.width()], &host);
        Ok(())
    }

    /// Hands host data already read back to the sink as `name`.
    pub fn tap_host(&mut self, name: &str, shape: [usize; 2], data: &[f32]) {
        if let Some(sink) = self.sink.as_deref_mut() {
            if sink.wants(name, self.layer) {
                sink.record(name, self.layer, shape, data);
            }
        }
    }
}

impl<'s> Deref for Cx<'s, '_> {
    type Target = dyn Ops + 's;

    fn deref(&self) -> &Self::Target {
        self.ops
    }
}

impl DerefMut for Cx<'_, '_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.ops
    }
}
