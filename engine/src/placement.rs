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
//! [`Devices::for_model`] builds the table from `-g N` and `--fixed-on`
//! ([`Placement::gpu_split`]): layers `0..N` on the Vulkan device (all of
//! them for -1), the rest on the CPU, the embedding and the output head
//! where `--fixed-on` says (by default the embedding on the GPU when any
//! layer is, the head with the last layer). Before anything is loaded it
//! adds up what each device will hold ([`ModelBytes`], [`Placement::budget`]:
//! weights by placement, KV caches, scratch) and refuses, in one line that
//! names the largest `-g` that fits, a plan whose GPU part exceeds the
//! device-local memory; the [`Plan`] says which device runs what and how
//! many bytes it holds. The model code is the same in every case.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::cpu::{CpuBackend, Threads};
use crate::expert_cache::{CacheSize, LayerCache, LayerStats};
use crate::fault;
use crate::model::{Model, HEAD_BLOCK};
use crate::ops::{Act, BackendError, KvType, Ops};
use crate::vulkan::{VulkanBackend, VulkanOptions};

/// A kind of device, as `--fixed-on` names it; in a table from
/// [`Placement::gpu_split`] also the device index (`Side::Cpu as usize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Cpu = 0,
    Gpu = 1,
}

impl FromStr for Side {
    type Err = String;

    fn from_str(s: &str) -> Result<Side, String> {
        match s {
            "cpu" => Ok(Side::Cpu),
            "gpu" => Ok(Side::Gpu),
            _ => Err(format!("{s:?}: expected cpu or gpu")),
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Cpu => "cpu",
            Side::Gpu => "gpu",
        })
    }
}

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

    /// The table `-g n_gpu --fixed-on fixed` asks for, numbered by
    /// [`Side`] (CPU 0, GPU 1): layers `0..n_gpu` on the GPU, the rest on
    /// the CPU; the embedding and the head both on `fixed` when given,
    /// otherwise the embedding on the GPU when any layer is there and the
    /// head with the last layer.
    pub fn gpu_split(n_layer: usize, n_gpu: usize, fixed: Option<Side>) -> Placement {
        let mut p = Placement::split(n_layer, n_gpu, Side::Gpu as usize, Side::Cpu as usize);
        match fixed {
            Some(side) => (p.embed, p.head) = (side as usize, side as usize),
            None if n_gpu == 0 => p.embed = Side::Cpu as usize,
            None => {}
        }
        p
    }

    /// The same table with the devices it uses numbered `0..` in
    /// ascending order, and the old index of each new one.
    pub fn compact(&self) -> (Placement, Vec<usize>) {
        let used = self.devices_used();
        let new = |d: usize| used.iter().position(|&u| u == d).expect("used");
        let p = Placement {
            embed: new(self.embed),
            layers: self.layers.iter().map(|&d| new(d)).collect(),
            head: new(self.head),
        };
        (p, used)
    }

    /// What each device (index) holds under this table; devices it does
    /// not use get zeros.
    pub fn budget(&self, m: &ModelBytes) -> Vec<DeviceBytes> {
        let n_dev = self.devices_used().last().map_or(0, |&d| d + 1);
        let mut out = vec![DeviceBytes::default(); n_dev];
        // A tensor needed twice on one device (a tied head) is held once.
        let mut seen: HashSet<(usize, &str)> = HashSet::new();
        let on_gpu = |d: usize, l: usize| match &m.gpu_layers {
            Some(g) if d == Side::Gpu as usize => &g[l],
            _ => &m.layers[l],
        };
        let layers = self
            .layers
            .iter()
            .enumerate()
            .map(|(l, &d)| (d, on_gpu(d, l)));
        let stages = [(self.embed, &m.embed), (self.head, &m.head)]
            .into_iter()
            .chain(layers);
        for (d, tensors) in stages {
            for (name, bytes) in tensors {
                if seen.insert((d, name.as_str())) {
                    out[d].weights += bytes;
                }
            }
        }
        for &d in &self.layers {
            out[d].kv += m.kv_per_layer;
        }
        for d in self.devices_used() {
            out[d].scratch += m.scratch;
        }
        if m.gpu_layers.is_some() && self.layers.contains(&(Side::Gpu as usize)) {
            out[Side::Gpu as usize].scratch += m.gpu_scratch;
        }
        out[self.head].scratch += m.logits;
        out
    }

    pub fn n_layer(&self) -> usize {
        self.layers.len()
    }

    /// The stages device `dev` runs, in words ("embedding, layers 0-14").
    pub fn describe(&self, dev: usize) -> String {
        let mut parts = Vec::new();
        if self.embed == dev {
            parts.push("embedding".to_string());
        }
        let mut l = 0;
        while l < self.layers.len() {
            if self.layers[l] != dev {
                l += 1;
                continue;
            }
            let start = l;
            while l < self.layers.len() && self.layers[l] == dev {
                l += 1;
            }
            parts.push(match l - start {
                1 => format!("layer {start}"),
                _ => format!("layers {start}-{}", l - 1),
            });
        }
        if self.head == dev {
            parts.push("output head".to_string());
        }
        match parts.is_empty() {
            true => "nothing".into(),
            false => parts.join(", "),
        }
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

/// Bytes a device holds for a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceBytes {
    pub weights: u64,
    pub kv: u64,
    /// Activations: scratch, the hidden state, the logits (head's device).
    pub scratch: u64,
}

impl DeviceBytes {
    pub fn total(&self) -> u64 {
        self.weights + self.kv + self.scratch
    }
}

/// Room a device buffer may take beyond its contents: the Vulkan backend's
/// 256-byte sentinel and rounding to whole words.
pub const BUFFER_SLACK: u64 = 256 + 4;

/// What a model needs, stage by stage, for a session of `n_ctx` positions
/// and `n_batch` rows: the input of [`Placement::budget`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelBytes {
    /// Tensors (name, bytes) of the embedding, the head (a tied head names
    /// `token_embd.weight`), each layer.
    pub embed: Vec<(String, u64)>,
    pub head: Vec<(String, u64)>,
    pub layers: Vec<Vec<(String, u64)>>,
    /// K and V caches of one layer.
    pub kv_per_layer: u64,
    /// Scratch and hidden state of every device that runs a stage.
    pub scratch: u64,
    /// The logits buffer, on the head's device.
    pub logits: u64,
    /// With an expert slot cache (`--moe-cache`): what each layer holds
    /// when it runs on the GPU (slots instead of the experts), and the
    /// cache's buffers there.
    pub gpu_layers: Option<Vec<Vec<(String, u64)>>>,
    pub gpu_scratch: u64,
}

impl ModelBytes {
    /// From the model's tensor table and shapes (what `Session` allocates,
    /// each buffer with [`BUFFER_SLACK`]).
    pub fn of(model: &Model, n_ctx: usize, n_batch: usize, kv_type: KvType) -> ModelBytes {
        use crate::model::Role;
        let hp = model.hparams();
        let table = model.tensors();
        let t = |i: &crate::gguf::TensorInfo| (i.name.clone(), i.n_bytes.div_ceil(4) * 4);
        let (mut embed, mut head) = (Vec::new(), Vec::new());
        for (&role, info) in &table.global {
            match role {
                Role::TokEmbd => embed.push(t(info)),
                _ => head.push(t(info)),
            }
        }
        let layers = table
            .layers
            .iter()
            .map(|m| m.values().map(t).collect())
            .collect();
        let buf =
            |rows: usize, width: usize, bytes: usize| (rows * width * bytes) as u64 + BUFFER_SLACK;
        let eb = match kv_type {
            KvType::F32 => 4,
            KvType::F16 => 2,
        };
        // Scratch (xb, q, k, v, att, proj, gate, up; with experts probs, ids,
        // weights, experts) and the hidden state.
        let mut widths = vec![
            hp.n_embd,
            hp.q_width(),
            hp.k_width(),
            hp.v_width(),
            hp.attn_out_width(),
            hp.n_embd,
            hp.ffn_width(),
            hp.ffn_width(),
            hp.n_embd,
        ];
        if let Some(m) = hp.moe {
            // probs, ids, weights, experts
            widths.extend([m.n_expert, m.n_used, m.n_used, m.n_used * hp.n_embd]);
        }
        ModelBytes {
            embed,
            head,
            layers,
            kv_per_layer: buf(n_ctx, hp.k_width(), eb) + buf(n_ctx, hp.v_width(), eb),
            scratch: widths.iter().map(|&w| buf(n_batch, w, 4)).sum(),
            logits: buf(HEAD_BLOCK, hp.n_vocab, 4),
            gpu_layers: None,
            gpu_scratch: 0,
        }
    }

    /// The same with GPU layers holding `n_slots` expert slots instead of
    /// their experts (each slot weight with [`BUFFER_SLACK`]) and the
    /// cache's buffers for `n_batch` rows.
    pub fn with_expert_slots(
        mut self,
        model: &Model,
        n_slots: usize,
        n_batch: usize,
    ) -> ModelBytes {
        let Some(moe) = model.hparams().moe else {
            return self;
        };
        let gpu = model
            .tensors()
            .layers
            .iter()
            .map(|map| {
                map.iter()
                    .filter_map(|(role, i)| {
                        let slots = |i: &crate::gguf::TensorInfo| {
                            let b = i.n_bytes / moe.n_expert as u64 * n_slots as u64;
                            (
                                format!("{} slots", i.name),
                                b.div_ceil(4) * 4 + BUFFER_SLACK,
                            )
                        };
                        match role.is_expert_matrix() {
                            true if n_slots == 0 => None,
                            true => Some(slots(i)),
                            false => Some((i.name.clone(), i.n_bytes.div_ceil(4) * 4)),
                        }
                    })
                    .collect()
            })
            .collect();
        let buf = |width: usize| (n_batch * width * 4) as u64 + BUFFER_SLACK;
        self.gpu_layers = Some(gpu);
        self.gpu_scratch = 2 * buf(moe.n_used) + buf(moe.n_used * model.hparams().n_embd);
        self
    }
}

/// Bytes of one expert of a layer of `model` (gate, up and down together).
pub fn expert_bytes(model: &Model) -> u64 {
    let n_expert = model.hparams().moe.map_or(1, |m| m.n_expert) as u64;
    model.tensors().layers.first().map_or(0, |map| {
        map.iter()
            .filter(|(r, _)| r.is_expert_matrix())
            .map(|(_, i)| i.n_bytes / n_expert)
            .sum()
    })
}

/// What `-g N --fixed-on` decided: which device runs what, the bytes each
/// holds, and the GPU's device-local memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The table, numbered as [`Devices`] numbers its backends.
    pub placement: Placement,
    /// Per device: its name and what it holds.
    pub names: Vec<String>,
    pub bytes: Vec<DeviceBytes>,
    /// Per device: its memory limit (the GPU's device-local bytes).
    pub limits: Vec<Option<u64>>,
    /// With `--moe-cache`: the GPU layers' expert slots each (their
    /// experts stay on the host).
    pub expert_slots: Option<usize>,
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

impl fmt::Display for Plan {
    /// One line per device: "plan: cpu (2 threads): layers 15-29, output
    /// head: weights 40.0 MiB + KV 7.5 MiB + scratch 2.0 MiB = 49.5 MiB".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (d, name) in self.names.iter().enumerate() {
            let b = self.bytes[d];
            write!(
                f,
                "plan: {name}: {}: weights {} + KV {} + scratch {} = {}",
                self.placement.describe(d),
                mib(b.weights),
                mib(b.kv),
                mib(b.scratch),
                mib(b.total())
            )?;
            if let Some(limit) = self.limits[d] {
                write!(f, " of {}", mib(limit))?;
                if let Some(n) = self.expert_slots {
                    write!(f, "; experts on the host, {n} slots a layer here")?;
                }
            }
            if d + 1 < self.names.len() {
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

/// What `-g`, `--fixed-on`, `--device` and `--validate` ask for.
#[derive(Clone, Debug, Default)]
pub struct GpuRequest {
    /// -1: every layer; 0: none; N: the first N.
    pub gpu_layers: i64,
    /// Where the embedding and the head go (None: see
    /// [`Placement::gpu_split`]).
    pub fixed_on: Option<Side>,
    /// CPU threads (0: one per core).
    pub threads: usize,
    pub vk: VulkanOptions,
    /// At most this many bytes on the GPU (None: its device-local memory;
    /// tests set less).
    pub memory_limit: Option<u64>,
    /// `--moe-cache`: the experts of GPU layers stay on the host, with this
    /// many slots on the GPU ([`crate::expert_cache`]).
    pub moe_cache: Option<CacheSize>,
}

/// Layers on the GPU that `-g gpu_layers` means for `n_layer` layers.
pub fn gpu_layer_count(gpu_layers: i64, n_layer: usize) -> Result<usize, BackendError> {
    match gpu_layers {
        -1 => Ok(n_layer),
        n if n >= 0 => Ok((n as usize).min(n_layer)),
        n => Err(BackendError::Device {
            backend: "placement".into(),
            message: format!("-g {n}: expected -1 (all), 0 (none) or a layer count"),
        }),
    }
}

/// The largest `n` up to `n_gpu` for which the GPU part of `-g n
/// --fixed-on fixed` fits in `limit` bytes (None: not even `-g 0`'s, which
/// is empty unless `fixed` puts the embedding and head on the GPU).
pub fn largest_fit(m: &ModelBytes, n_gpu: usize, fixed: Option<Side>, limit: u64) -> Option<usize> {
    (0..=n_gpu).rev().find(|&n| {
        let b = Placement::gpu_split(m.layers.len(), n, fixed).budget(m);
        b.get(Side::Gpu as usize).map_or(0, DeviceBytes::total) <= limit
    })
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
    /// Expert slots per GPU layer when the GPU layers cache their experts.
    expert_slots: Option<usize>,
    /// The device index of the GPU, when one is in use.
    gpu: Option<usize>,
    /// `caches[l]`: layer `l`'s expert slot cache, when it has one.
    caches: Vec<Option<LayerCache>>,
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
            caches: Vec::new(),
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

    /// The devices `req` asks for, for `model` with a session of `n_ctx`
    /// positions and `n_batch` rows: the table of
    /// [`Placement::gpu_split`], checked against the GPU's device-local
    /// memory before anything is loaded (an error names the largest `-g`
    /// that fits), and the [`Plan`].
    pub fn for_model(
        model: &Model,
        req: &GpuRequest,
        n_ctx: usize,
        n_batch: usize,
        kv_type: KvType,
    ) -> Result<(Devices, Plan), BackendError> {
        let n_layer = model.hparams().n_layer;
        let n_gpu = gpu_layer_count(req.gpu_layers, n_layer)?;
        let table = Placement::gpu_split(n_layer, n_gpu, req.fixed_on);
        let expert_slots = match (req.moe_cache, model.hparams().moe) {
            (Some(c), Some(m)) if n_gpu > 0 => {
                Some(c.slots(m.n_expert, expert_bytes(model), n_gpu))
            }
            _ => None,
        };
        let model_bytes = |model: &Model| {
            let m = ModelBytes::of(model, n_ctx, n_batch, kv_type);
            match expert_slots {
                Some(n) => m.with_expert_slots(model, n, n_batch),
                None => m,
            }
        };
        let bytes = table.budget(&model_bytes(model));
        let (placement, kinds) = table.compact();
        let mut backends: Vec<Box<dyn Ops>> = Vec::new();
        let (mut names, mut limits, mut per_dev) = (Vec::new(), Vec::new(), Vec::new());
        for &k in &kinds {
            let b = bytes[k];
            if k == Side::Gpu as usize {
                let mut gpu = VulkanBackend::new(&req.vk).map_err(|e| BackendError::Device {
                    backend: "vulkan".into(),
                    message: e.to_string(),
                })?;
                if let Some(m) = req.memory_limit {
                    gpu.set_memory_budget(m.min(gpu.memory_budget()));
                }
                let limit = gpu.memory_budget();
                if b.total() > limit {
                    let m = model_bytes(model);
                    let fits = match largest_fit(&m, n_gpu, req.fixed_on, limit) {
                        Some(n) => format!("-g {n} fits"),
                        None => "nothing fits: run with -g 0".into(),
                    };
                    return Err(BackendError::Device {
                        backend: gpu.name(),
                        message: format!(
                            "the GPU part of -g {} does not fit: {} needs {} ({}), the device has {} of device-local memory; {fits}",
                            req.gpu_layers,
                            table.describe(k),
                            mib(b.total()),
                            format_args!(
                                "weights {} + KV {} + scratch {}",
                                mib(b.weights),
                                mib(b.kv),
                                mib(b.scratch)
                            ),
                            mib(limit)
                        ),
                    });
                }
                limits.push(Some(limit));
                backends.push(Box::new(gpu));
            } else {
                let cpu = CpuBackend::try_new(req.threads).map_err(|e| BackendError::Device {
                    backend: "cpu".into(),
                    message: e.to_string(),
                })?;
                limits.push(None);
                backends.push(Box::new(cpu));
            }
            names.push(backends.last().expect("pushed").name());
            per_dev.push(b);
        }
        let plan = Plan {
            placement: placement.clone(),
            names,
            bytes: per_dev,
            limits,
            expert_slots,
        };
        let mut devices = Devices::new(backends, placement);
        devices.expert_slots = expert_slots;
        devices.gpu = kinds.iter().position(|&k| k == Side::Gpu as usize);
        Ok((devices, plan))
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

    /// Installs the layers' expert slot caches (`caches[l]` for layer `l`).
    pub fn set_expert_caches(&mut self, caches: Vec<Option<LayerCache>>) {
        self.caches = caches;
    }

    /// Hits and pairs of every cached layer so far.
    pub fn expert_stats(&self) -> Vec<LayerStats> {
        self.caches
            .iter()
            .flatten()
            .map(LayerCache::stats)
            .collect()
    }

    /// The backend that runs `stage`, and the layer's expert slot cache.
    pub fn at_with_cache(&mut self, stage: Stage) -> (&mut dyn Ops, Option<&mut LayerCache>) {
        let d = self.device_of(stage);
        let cache = match stage {
            Stage::Layer(l) => self.caches.get_mut(l).and_then(Option::as_mut),
            Stage::Embed | Stage::Head => None,
        };
        (self.backends[d].as_mut(), cache)
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
    fn gpu_split_follows_g_and_fixed_on() {
        let (c, g) = (Side::Cpu as usize, Side::Gpu as usize);
        // -g 0: all on the CPU, unless --fixed-on gpu moves embedding and head.
        let p = Placement::gpu_split(3, 0, None);
        assert_eq!((p.embed, p.layers.clone(), p.head), (c, vec![c; 3], c));
        let p = Placement::gpu_split(3, 0, Some(Side::Gpu));
        assert_eq!((p.embed, p.layers.clone(), p.head), (g, vec![c; 3], g));
        // -g 1: embedding follows the GPU, head the last layer.
        let p = Placement::gpu_split(3, 1, None);
        assert_eq!((p.embed, p.layers.clone(), p.head), (g, vec![g, c, c], c));
        let p = Placement::gpu_split(3, 1, Some(Side::Cpu));
        assert_eq!((p.embed, p.head), (c, c));
        let p = Placement::gpu_split(3, 2, Some(Side::Gpu));
        assert_eq!((p.embed, p.layers.clone(), p.head), (g, vec![g, g, c], g));
        // Every layer: the head too, unless fixed on the CPU.
        let p = Placement::gpu_split(3, 3, None);
        assert_eq!((p.embed, p.head, p.devices_used()), (g, g, vec![g]));
        let p = Placement::gpu_split(3, 3, Some(Side::Cpu));
        assert_eq!((p.embed, p.layers.clone(), p.head), (c, vec![g; 3], c));
        assert_eq!(gpu_layer_count(-1, 30).unwrap(), 30);
        assert_eq!(gpu_layer_count(99, 30).unwrap(), 30);
        assert_eq!(gpu_layer_count(7, 30).unwrap(), 7);
        assert!(gpu_layer_count(-2, 30).is_err());
        assert_eq!("gpu".parse::<Side>(), Ok(Side::Gpu));
        assert!("vulkan".parse::<Side>().is_err());
    }

    #[test]
    fn compact_numbers_the_devices_used() {
        // Only the GPU in use: it becomes device 0.
        let (p, old) = Placement::gpu_split(2, 2, None).compact();
        assert_eq!((p, old), (Placement::single(2), vec![1]));
        let (p, old) = Placement::gpu_split(2, 1, None).compact();
        assert_eq!(
            (p.embed, p.layers, p.head, old),
            (1, vec![1, 0], 0, vec![0, 1])
        );
        assert_eq!(
            Placement::gpu_split(4, 2, Some(Side::Cpu)).describe(1),
            "layers 0-1"
        );
        assert_eq!(
            Placement::gpu_split(4, 1, None).describe(1),
            "embedding, layer 0"
        );
        assert_eq!(
            Placement::gpu_split(4, 1, None).describe(0),
            "layers 1-3, output head"
        );
    }

    /// Three layers of 100 bytes each (two tensors), an embedding of 1000
    /// that a tied head reuses, an output norm of 10.
    fn model_bytes() -> ModelBytes {
        let t = |n: &str, b: u64| (n.to_string(), b);
        ModelBytes {
            embed: vec![t("token_embd.weight", 1000)],
            head: vec![t("output_norm.weight", 10), t("token_embd.weight", 1000)],
            layers: (0..3)
                .map(|l| vec![t(&format!("blk.{l}.a"), 60), t(&format!("blk.{l}.b"), 40)])
                .collect(),
            kv_per_layer: 7,
            scratch: 5,
            logits: 3,
            gpu_layers: None,
            gpu_scratch: 0,
        }
    }

    #[test]
    fn budget_adds_weights_kv_and_scratch_per_device() {
        let m = model_bytes();
        let db = |weights, kv, scratch| DeviceBytes {
            weights,
            kv,
            scratch,
        };
        // CPU only: the tied embedding once.
        let b = Placement::gpu_split(3, 0, None).budget(&m);
        assert_eq!(b, vec![db(1310, 21, 8)]);
        // -g 1: the GPU holds the embedding and layer 0, the CPU the rest
        // and the head, which needs the embedding table again.
        let b = Placement::gpu_split(3, 1, None).budget(&m);
        assert_eq!(b, vec![db(200 + 10 + 1000, 14, 8), db(1000 + 100, 7, 5)]);
        // --fixed-on cpu: the GPU holds layers only.
        let b = Placement::gpu_split(3, 2, Some(Side::Cpu)).budget(&m);
        assert_eq!(b, vec![db(1110, 7, 8), db(200, 14, 5)]);
        // Everything on the GPU.
        let b = Placement::gpu_split(3, 3, None).budget(&m);
        assert_eq!(b[1], db(1310, 21, 8));
        assert_eq!(b[1].total(), 1339);
        assert_eq!(b[0], DeviceBytes::default());
    }

    #[test]
    fn expert_slots_replace_a_gpu_layers_experts_in_the_budget() {
        let db = |weights, kv, scratch| DeviceBytes {
            weights,
            kv,
            scratch,
        };
        // On the GPU a layer holds 60 + 10 (slots) instead of 100; the
        // cache's buffers add 4 there. The CPU's layers keep their tensors.
        let mut m = model_bytes();
        let t = |n: &str, b: u64| (n.to_string(), b);
        m.gpu_layers = Some(
            (0..3)
                .map(|l| {
                    vec![
                        t(&format!("blk.{l}.a"), 60),
                        t(&format!("blk.{l}.b slots"), 10),
                    ]
                })
                .collect(),
        );
        m.gpu_scratch = 4;
        let b = Placement::gpu_split(3, 1, None).budget(&m);
        assert_eq!(b, vec![db(200 + 10 + 1000, 14, 8), db(1000 + 70, 7, 5 + 4)]);
        // No GPU layer: no slots, no cache buffers.
        let b = Placement::gpu_split(3, 0, Some(Side::Gpu)).budget(&m);
        assert_eq!(b[1], db(1010, 0, 8));
        assert_eq!(largest_fit(&m, 3, None, 1010 + 210 + 21 + 12), Some(3));
    }

    #[test]
    fn largest_fit_lowers_n_until_the_gpu_part_fits() {
        let m = model_bytes();
        // All 3 layers need 1339 bytes on the GPU.
        assert_eq!(largest_fit(&m, 3, None, 1339), Some(3));
        // -g 2: 1000 + 200 + 14 + 5 = 1219 (the head goes to the CPU).
        assert_eq!(largest_fit(&m, 3, None, 1338), Some(2));
        assert_eq!(largest_fit(&m, 3, None, 1219), Some(2));
        assert_eq!(largest_fit(&m, 3, None, 1218), Some(1));
        // Layers only (--fixed-on cpu): -g 1 is 100 + 7 + 5 = 112 bytes.
        assert_eq!(largest_fit(&m, 3, Some(Side::Cpu), 111), Some(0));
        assert_eq!(largest_fit(&m, 3, Some(Side::Cpu), 112), Some(1));
        // --fixed-on gpu: even -g 0 puts 1010 + 3 + 5 bytes there.
        assert_eq!(largest_fit(&m, 3, Some(Side::Gpu), 1017), None);
        assert_eq!(largest_fit(&m, 3, Some(Side::Gpu), 1018), Some(0));
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
