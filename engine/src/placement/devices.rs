//! [`Devices`]: the backends serving one model, the placement table, and
//! the hidden state's single crossing point between them.

use std::sync::Arc;

use super::{Placement, Stage};
use crate::cpu::CpuBackend;
use crate::fault;
use crate::ops::{Act, BackendError, Ops, Workers};

/// The backends serving one model, the placement table, and one
/// hidden-state buffer per device in use.
pub struct Devices {
    backends: Vec<Box<dyn Ops>>,
    placement: Placement,
    /// `hidden[d]`: `[n_batch, n_embd]` on device `d`, when `d` is in use.
    hidden: Vec<Option<Act>>,
    /// Host staging for a handoff: `[n_batch, n_embd]`.
    staging: Vec<f32>,
    /// Expert slots per GPU layer when the GPU layers cache their experts.
    expert_slots: Option<usize>,
    /// The device index of the GPU, when one is in use.
    gpu: Option<usize>,
}

impl Devices {
    /// # Panics
    /// If the placement names a device beyond `backends`.
    pub fn new(backends: Vec<Box<dyn Ops>>, placement: Placement) -> Devices {
        let used = placement.devices_used();
        if let Some(&d) = used.iter().find(|&&d| d >= backends.len()) {
            panic!(
                "placement uses device {d}, only {} backends",
                backends.len()
            );
        }
        let n = backends.len();
        Devices {
            backends,
            placement,
            hidden: vec![None; n],
            staging: Vec::new(),
            expert_slots: None,
            gpu: None,
        }
    }

    /// One CPU backend with `threads` threads (0: all cores) for everything.
    pub fn cpu(n_layer: usize, threads: usize) -> Result<Devices, BackendError> {
        let cpu = CpuBackend::try_new(threads).map_err(|e| BackendError::Device {
            backend: "cpu".into(),
            message: e.to_string(),
        })?;
        Ok(Devices::new(
            vec![Box::new(cpu)],
            Placement::single(n_layer),
        ))
    }

    /// Validation-layer messages of every device so far.
    pub fn validation_messages(&self) -> Vec<String> {
        self.backends
            .iter()
            .flat_map(|b| b.validation_messages())
            .collect()
    }

    /// Device submissions of every device so far, and how many replayed a
    /// recorded command buffer ([`Ops::submissions`]).
    pub fn submissions(&self) -> (usize, usize) {
        self.backends
            .iter()
            .map(|b| b.submissions())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    /// Dispatches of every device so far ([`Ops::dispatches`]).
    pub fn dispatches(&self) -> usize {
        self.backends.iter().map(|b| b.dispatches()).sum()
    }

    /// The worker team a forward pass runs in: that of the first device in
    /// use that has one (see [`Ops::workers`]). Backends on other teams
    /// still work from inside it, through a hand-off per op.
    pub fn workers(&self) -> Option<Arc<dyn Workers>> {
        self.placement
            .devices_used()
            .into_iter()
            .find_map(|d| self.backends[d].workers())
    }

    /// A new, empty backend on the host workers of the first device in use
    /// that has them ([`Ops::host_sibling`]).
    pub fn host_sibling(&self) -> Option<Box<dyn Ops>> {
        self.placement
            .devices_used()
            .into_iter()
            .find_map(|d| self.backends[d].host_sibling())
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    pub fn n_devices(&self) -> usize {
        self.backends.len()
    }

    /// The device index of `stage`.
    pub fn device_of(&self, stage: Stage) -> usize {
        self.placement.device(stage)
    }

    /// Backend `dev`'s name ("cpu (2 threads)").
    pub fn name(&self, dev: usize) -> String {
        self.backends[dev].name()
    }

    /// Backend `dev`.
    pub fn backend(&mut self, dev: usize) -> &mut dyn Ops {
        self.backends[dev].as_mut()
    }

    /// Expert slots per layer when the GPU layers cache their experts
    /// (`--moe-cache`).
    pub fn expert_slots(&self) -> Option<usize> {
        self.expert_slots
    }

    /// The expert slots of layer `l` when it caches its experts: a GPU
    /// layer under `--moe-cache`.
    pub fn cached_slots(&self, l: usize) -> Option<usize> {
        match self.gpu {
            Some(g) if self.device_of(Stage::Layer(l)) == g => self.expert_slots,
            _ => None,
        }
    }

    /// Makes the layers on device `gpu` cache their experts in `n_slots`
    /// slots each ([`cached_slots`](Self::cached_slots)); set up by
    /// [`crate::setup`] for `--moe-cache`.
    pub fn cache_experts(&mut self, gpu: usize, n_slots: usize) {
        self.gpu = Some(gpu);
        self.expert_slots = Some(n_slots);
    }

    /// The backend that runs `stage`.
    pub fn at(&mut self, stage: Stage) -> &mut dyn Ops {
        let d = self.device_of(stage);
        self.backends[d].as_mut()
    }

    /// Allocates an activation on device `dev`, stamped with the device.
    pub fn alloc(&mut self, dev: usize, rows: usize, width: usize) -> Result<Act, BackendError> {
        Ok(self.backends[dev].alloc(rows, width)?.on_device(dev))
    }

    /// Allocates the hidden-state buffer `[rows, width]` on every device the
    /// placement uses, and the host staging a handoff goes through. Called
    /// once, before the first forward pass.
    pub fn alloc_hidden(&mut self, rows: usize, width: usize) -> Result<(), BackendError> {
        for d in self.placement.devices_used() {
            self.hidden[d] = Some(self.alloc(d, rows, width)?);
        }
        if self.placement.devices_used().len() > 1 {
            self.staging = vec![crate::poison::fill(); rows * width];
        }
        Ok(())
    }

    /// The first `rows` rows of the hidden-state buffer of `stage`'s device.
    ///
    /// # Panics
    /// Before [`alloc_hidden`](Self::alloc_hidden).
    pub fn hidden(&self, stage: Stage, rows: usize) -> Act {
        let d = self.device_of(stage);
        self.hidden[d]
            .expect("alloc_hidden before the first forward pass")
            .first(rows)
    }

    /// The hidden state's single crossing point: `x` (on whatever device
    /// holds it) made available to `to`'s device. Returns `x` itself when it
    /// is already there; otherwise copies its rows through host memory into
    /// the first rows of that device's hidden-state buffer and returns them.
    pub fn handoff(&mut self, x: Act, to: Stage) -> Result<Act, BackendError> {
        let target = self.device_of(to);
        if x.device() == target {
            return Ok(x);
        }
        let dst = self.hidden(to, x.rows());
        assert_eq!(
            dst.width(),
            x.width(),
            "handoff of a tensor that is not the hidden state"
        );
        let host = &mut self.staging[..x.len()];
        self.backends[x.device()].read(x, host)?;
        if fault::active("hybrid-handoff") {
            // Each row gets the previous token's (the first keeps its own).
            let w = x.width();
            host.copy_within(..host.len() - w, w);
        }
        if !fault::active("handoff-stale") {
            self.backends[target].write(dst, host)?;
        }
        Ok(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoff_moves_rows_only_across_devices() {
        let backends: Vec<Box<dyn Ops>> =
            vec![Box::new(CpuBackend::new(1)), Box::new(CpuBackend::new(1))];
        let mut d = Devices::new(backends, Placement::split(2, 1, 0, 1));
        d.alloc_hidden(4, 3).unwrap();
        let x = d.hidden(Stage::Embed, 4);
        assert_eq!(x.device(), 0);
        let data: Vec<f32> = (0..12).map(|v| v as f32).collect();
        d.backend(0).write(x, &data).unwrap();
        // Same device: the very same view.
        assert_eq!(d.handoff(x, Stage::Layer(0)).unwrap(), x);
        // Across: rows 2..4 land in the first rows of device 1's buffer.
        let y = d.handoff(x.rows_from(2, 2), Stage::Layer(1)).unwrap();
        assert_eq!((y.device(), y.row0(), y.rows()), (1, 0, 2));
        let mut back = vec![0.0; 6];
        d.backend(1).read(y, &mut back).unwrap();
        assert_eq!(back, data[6..]);
        // The rows no hand-off wrote hold what a fresh buffer holds: the
        // poison in test builds (crate::poison), zeros otherwise.
        let rest = d.hidden(Stage::Layer(1), 4).rows_from(2, 2);
        d.backend(1).read(rest, &mut back).unwrap();
        let fresh = crate::poison::fill();
        assert!(
            back.iter().all(|v| v.to_bits() == fresh.to_bits()),
            "{back:?}"
        );
    }
}
