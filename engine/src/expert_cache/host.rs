//! [`HostDevice`]: the CPU device that multiplies the missed experts of
//! every cached layer, through its [`Ops`] (`matmul_id`, `glu`), and the
//! buffers it works in.

use std::sync::{Arc, Mutex};

use crate::cpu::CpuBackend;
use crate::model::Hparams;
use crate::numerics::CpuNumerics;
use crate::ops::{Act, BackendError, GluKind, Ops, Weight, WeightSource};
use crate::placement::Devices;

/// A CPU device on the CPU layers' threads when there are any (they never
/// run at the same time as a GPU layer's missed experts), else on threads
/// of its own; shared by the cached layers, which run one at a time.
pub struct HostDevice {
    ops: Box<dyn Ops>,
    /// `[rows, n_embd]`: each miss's input row.
    xs: Act,
    /// `[rows, 1]`: each miss's expert (as f32).
    ids: Act,
    /// `[rows, n_ff_exp]`: the up product; the gate product, then the GLU.
    up: Act,
    gate: Act,
    /// `[rows, n_embd]`: the down product.
    down: Act,
}

/// The missed pairs' products on the host: `up`, `gate`, `act` (after the
/// GLU) `[m, n_ff_exp]`, `down` `[m, n_embd]`, one row per miss.
#[derive(Default)]
pub(super) struct HostPart {
    pub up: Vec<f32>,
    pub gate: Vec<f32>,
    pub act: Vec<f32>,
    pub down: Vec<f32>,
}

impl HostDevice {
    /// The host device of a model with experts, with room for every pair
    /// of `n_batch` rows (`rows = n_batch · n_used`); `threads` (0: one
    /// per core) when no device in use has host workers. Its GLU rounds as
    /// [`CpuNumerics::Reference`] (libm's exp per element).
    ///
    /// # Panics
    /// For a model without experts.
    pub fn new(
        devices: &Devices,
        hp: &Hparams,
        n_batch: usize,
        threads: usize,
    ) -> Result<Arc<Mutex<HostDevice>>, BackendError> {
        let m = hp.moe.expect("a model with experts");
        let mut ops = match devices.host_sibling() {
            Some(ops) => ops,
            None => Box::new(
                CpuBackend::try_new(threads).map_err(|e| BackendError::Device {
                    backend: "cpu (experts)".into(),
                    message: e.to_string(),
                })?,
            ),
        };
        ops.set_cpu_numerics(CpuNumerics::Reference);
        let rows = n_batch * m.n_used;
        let (d, f) = (hp.n_embd, m.n_ff_exp);
        Ok(Arc::new(Mutex::new(HostDevice {
            xs: ops.alloc(rows, d)?,
            ids: ops.alloc(rows, 1)?,
            up: ops.alloc(rows, f)?,
            gate: ops.alloc(rows, f)?,
            down: ops.alloc(rows, d)?,
            ops,
        })))
    }

    /// Gate, up, down of one layer, as weights of this device.
    pub(super) fn upload(&mut self, host: &[WeightSource; 3]) -> Result<[Weight; 3], BackendError> {
        Ok([
            self.ops.upload(&host[0])?,
            self.ops.upload(&host[1])?,
            self.ops.upload(&host[2])?,
        ])
    }

    /// The products of the misses `mids` (`[m]`, each its expert of
    /// `n_expert`) from their rows `xs` (`[m, n_embd]`), with the weights
    /// `[gate, up, down]` of [`HostDevice::upload`].
    pub(super) fn products(
        &mut self,
        [gate, up, down]: [Weight; 3],
        n_expert: usize,
        kind: GluKind,
        mids: &[f32],
        xs: &[f32],
    ) -> Result<HostPart, BackendError> {
        let m = mids.len();
        let (ids, x) = (self.ids.first(m), self.xs.first(m));
        let (u, g, o) = (self.up.first(m), self.gate.first(m), self.down.first(m));
        let mut h = HostPart {
            up: vec![0.0; m * u.width()],
            gate: vec![0.0; m * g.width()],
            act: vec![0.0; m * g.width()],
            down: vec![0.0; m * o.width()],
        };
        let ops = &mut *self.ops;
        ops.write(ids, mids)?;
        ops.write(x, xs)?;
        ops.matmul_id(up, n_expert, ids, x, u);
        ops.matmul_id(gate, n_expert, ids, x, g);
        ops.read(u, &mut h.up)?;
        ops.read(g, &mut h.gate)?;
        ops.glu(kind, g, u);
        ops.read(g, &mut h.act)?;
        ops.matmul_id(down, n_expert, ids, g, o);
        ops.read(o, &mut h.down)?;
        Ok(h)
    }
}
