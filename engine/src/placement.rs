//! Which backend runs which part of a model, and the one place where the
//! hidden state crosses from one backend to another.
//!
//! A [`Placement`] is a table: the device of the embedding, of each layer
//! and of the output head. [`Devices`] holds the backends and the table. A
//! forward pass asks `devices.handoff(x, stage)` before each stage; when
//! the stage runs where `x` already is, that returns `x` unchanged,
//! otherwise it copies `x`'s rows through the host into the hidden-state
//! buffer of the stage's device (allocated once, [`Devices::alloc_hidden`])
//! and returns that. Nothing else moves between devices: each layer's
//! weights, KV cache and scratch live on the layer's device.
//!
//! [`Devices::with_gpu`] builds the table from `-g N`: every stage on the
//! CPU (0), on the Vulkan device (-1, or N at least the layer count), or the
//! embedding and layers `0..N` on the GPU and the rest on the CPU; the
//! model code is the same in every case.

use std::sync::Arc;

use crate::cpu::{CpuBackend, Threads};
use crate::fault;
use crate::ops::{Act, BackendError, Ops};
use crate::vulkan::{VulkanBackend, VulkanOptions};

/// A part of the forward pass that runs on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Token embedding (and its scaling).
    Embed,
    /// Transformer block `l`.
    Layer(usize),
    /// Final norm and output projection.
    Head,
}

/// The device index of each stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub embed: usize,
    pub layers: Vec<usize>,
    pub head: usize,
}

impl Placement {
    /// Everything on device 0.
    pub fn single(n_layer: usize) -> Placement {
        Placement {
            embed: 0,
            layers: vec![0; n_layer],
            head: 0,
        }
    }

    /// Layers `0..n_first` (and the embedding) on `first`, the rest (and
    /// the head) on `rest`. With `n_first == n_layer` the head follows the
    /// last layer onto `first`.
    pub fn split(n_layer: usize, n_first: usize, first: usize, rest: usize) -> Placement {
        let n_first = n_first.min(n_layer);
        let layers: Vec<usize> = (0..n_layer)
            .map(|l| if l < n_first { first } else { rest })
            .collect();
        Placement {
            embed: first,
            head: layers.last().copied().unwrap_or(first),
            layers,
        }
    }

    pub fn n_layer(&self) -> usize {
        self.layers.len()
    }

    /// The device that runs `stage`.
    ///
    /// # Panics
    /// For a layer index beyond the table.
    pub fn device(&self, stage: Stage) -> usize {
        match stage {
            Stage::Embed => self.embed,
            Stage::Layer(l) => self.layers[l],
            Stage::Head => self.head,
        }
    }

    /// Every device index the table uses, ascending.
    pub fn devices_used(&self) -> Vec<usize> {
        let mut d: Vec<usize> = self
            .layers
            .iter()
            .copied()
            .chain([self.embed, self.head])
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }
}

/// The backends serving one model, the placement table, and one
/// hidden-state buffer per device in use.
pub struct Devices {
    backends: Vec<Box<dyn Ops>>,
    placement: Placement,
    /// `hidden[d]`: `[n_batch, n_embd]` on device `d`, when `d` is in use.
    hidden: Vec<Option<Act>>,
    /// Host staging for a handoff: `[n_batch, n_embd]`.
    staging: Vec<f32>,
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

    /// The devices `-g gpu_layers` asks for: 0 the CPU only; -1 (or at
    /// least `n_layer`) everything on the Vulkan device `vk` selects; N in
    /// between the embedding and layers `0..N` on the GPU, the rest and the
    /// head on the CPU (`threads` threads).
    pub fn with_gpu(
        n_layer: usize,
        gpu_layers: i64,
        threads: usize,
        vk: &VulkanOptions,
    ) -> Result<Devices, BackendError> {
        if gpu_layers < -1 {
            return Err(BackendError::Device {
                backend: "placement".into(),
                message: format!("-g {gpu_layers}: expected -1 (all), 0 (none) or a layer count"),
            });
        }
        if gpu_layers == 0 {
            return Devices::cpu(n_layer, threads);
        }
        let gpu = VulkanBackend::new(vk).map_err(|e| BackendError::Device {
            backend: "vulkan".into(),
            message: e.to_string(),
        })?;
        if gpu_layers == -1 || gpu_layers as usize >= n_layer {
            return Ok(Devices::new(
                vec![Box::new(gpu)],
                Placement::single(n_layer),
            ));
        }
        let cpu = CpuBackend::try_new(threads).map_err(|e| BackendError::Device {
            backend: "cpu".into(),
            message: e.to_string(),
        })?;
        Ok(Devices::new(
            vec![Box::new(cpu), Box::new(gpu)],
            Placement::split(n_layer, gpu_layers as usize, 1, 0),
        ))
    }

    /// Validation-layer messages of every device so far.
    pub fn validation_messages(&self) -> Vec<String> {
        self.backends
            .iter()
            .flat_map(|b| b.validation_messages())
            .collect()
    }

    /// The pool a forward pass runs in: that of the first device in use
    /// that has one (see [`Ops::worker_pool`]). Backends on other pools
    /// still work from inside it, through a hand-off per op.
    pub fn worker_pool(&self) -> Option<Arc<Threads>> {
        self.placement
            .devices_used()
            .into_iter()
            .find_map(|d| self.backends[d].worker_pool())
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
            self.staging = vec![0.0; rows * width];
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
        self.backends[target].write(dst, host)?;
        Ok(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_places_layers_embedding_and_head() {
        let p = Placement::split(4, 1, 1, 0);
        assert_eq!(p.layers, [1, 0, 0, 0]);
        assert_eq!((p.device(Stage::Embed), p.device(Stage::Head)), (1, 0));
        assert_eq!(p.devices_used(), [0, 1]);
        // Every layer on the first device: the head follows it.
        let p = Placement::split(4, 4, 1, 0);
        assert_eq!((p.device(Stage::Head), p.devices_used()), (1, vec![1]));
        // None on the first: only the embedding runs there.
        let p = Placement::split(4, 0, 1, 0);
        assert_eq!(p.layers, [0; 4]);
        assert_eq!(p.device(Stage::Embed), 1);
        assert_eq!(Placement::single(3).devices_used(), [0]);
    }

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
    }
}
