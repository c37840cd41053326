//! A running model: weights prepared on its devices, KV caches and scratch
//! allocated once, the current position.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::expert_cache::{CacheBufs, HostDevice, LayerCache, LayerStats};
use crate::model::{
    ExpertRunner, HeadOut, Hparams, Model, ModelWeights, RoleMap, Scratch, Step, HEAD_BLOCK,
};
use crate::numerics::CpuNumerics;
use crate::ops::{Act, BackendError, Kv, KvType, Weight, WeightSource};
use crate::placement::{Devices, Stage};
use crate::setup::{open_devices, GpuRequest, Plan};
use crate::trace::TraceSink;

/// How a session is set up.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Context length (positions in the KV cache); 0: the model's training
    /// context, at most [`DEFAULT_MAX_CTX`].
    pub n_ctx: usize,
    /// Rows per forward pass: a longer prompt is processed in chunks of this
    /// many tokens, each as one matrix-matrix batch.
    pub n_batch: usize,
    pub kv_type: KvType,
    /// CPU threads (0: one per core).
    pub threads: usize,
}

/// The context a session gets when none is asked for (bounded so that a
/// model trained on 128k positions does not allocate a 128k cache).
pub const DEFAULT_MAX_CTX: usize = 4096;

impl Default for SessionConfig {
    fn default() -> SessionConfig {
        SessionConfig {
            n_ctx: 0,
            n_batch: 512,
            kv_type: KvType::F32,
            threads: 0,
        }
    }
}

impl SessionConfig {
    /// The context length and rows per pass a session of a model with
    /// `hp` gets (`n_ctx` 0 resolved, `n_batch` at most `n_ctx`).
    pub fn shape(&self, hp: &Hparams) -> Result<(usize, usize), SessionError> {
        let n_ctx = match self.n_ctx {
            0 => hp.n_ctx_train.min(DEFAULT_MAX_CTX),
            n => n,
        };
        if self.n_batch == 0 {
            return Err(SessionError::Config("n_batch must be at least 1".into()));
        }
        Ok((n_ctx, self.n_batch.min(n_ctx)))
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    #[error("{0}")]
    Backend(#[from] BackendError),
    #[error("context full: {n_tokens} tokens at position {pos} need {} positions, the context has {n_ctx}", pos + n_tokens)]
    ContextFull {
        pos: usize,
        n_tokens: usize,
        n_ctx: usize,
    },
    #[error("no tokens to process")]
    Empty,
    #[error("token id {token} at index {index} is outside the vocabulary ({n_vocab} tokens)")]
    TokenOutOfRange {
        token: u32,
        index: usize,
        n_vocab: usize,
    },
    #[error("invalid session setting: {0}")]
    Config(String),
}

/// Which positions of a forward pass get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outputs {
    /// The last position only: `[n_vocab]`.
    Last,
    /// Every position: `[n_tokens, n_vocab]`.
    All,
    /// The positions from index `k` of the tokens on: `[n_tokens - k,
    /// n_vocab]` (the head runs on those rows only). `From(0)` is `All`.
    From(usize),
}

/// A model ready to run on its devices.
pub struct Session {
    model: Arc<Model>,
    devices: Devices,
    weights: ModelWeights,
    /// One cache per layer, on the layer's device.
    kv: Vec<Kv>,
    /// `scratch[d]`: buffers of device `d` (`None` when `d` runs nothing).
    scratch: Vec<Option<Scratch>>,
    /// `caches[l]`: layer `l`'s expert slot cache, when it has one (lent
    /// to each forward pass as the layer's [`ExpertRunner`]).
    caches: Vec<Option<LayerCache>>,
    /// `[HEAD_BLOCK, n_vocab]` on the head's device.
    logits_dev: Act,
    /// `[n_vocab]`: the last position's logits, on the host.
    logits: Vec<f32>,
    /// `[n_tokens, n_vocab]`: every position's logits (grown by
    /// [`Outputs::All`] and [`Outputs::From`] only).
    all_logits: Vec<f32>,
    pos: usize,
    n_ctx: usize,
    n_batch: usize,
}

impl Session {
    /// A session on the CPU with `cfg.threads` threads.
    pub fn new(model: Arc<Model>, cfg: &SessionConfig) -> Result<Session, SessionError> {
        let devices = Devices::cpu(model.hparams().n_layer, cfg.threads)?;
        Session::with_devices(model, devices, cfg)
    }

    /// How the CPU devices round RoPE, attention, SwiGLU and the router
    /// softmax from the next forward pass on ([`CpuNumerics`]; a new
    /// session has [`CpuNumerics::Ggml`]). GPU devices are not affected.
    pub fn set_cpu_numerics(&mut self, numerics: CpuNumerics) {
        for d in 0..self.devices.n_devices() {
            self.devices.backend(d).set_cpu_numerics(numerics);
        }
    }

    /// A session on the devices `req` asks for (`-g`, `--fixed-on`), the
    /// memory of each checked before loading, and the [`Plan`].
    pub fn on_devices(
        model: Arc<Model>,
        req: &GpuRequest,
        cfg: &SessionConfig,
    ) -> Result<(Session, Plan), SessionError> {
        let (n_ctx, n_batch) = cfg.shape(model.hparams())?;
        let (devices, plan) = open_devices(&model, req, n_ctx, n_batch, cfg.kv_type)?;
        Ok((Session::with_devices(model, devices, cfg)?, plan))
    }

    /// A session on the given devices (placement decided by `devices`).
    /// Prepares every weight on the device that uses it and allocates the
    /// hidden-state buffers, per-device scratch, KV caches and logits.
    pub fn with_devices(
        model: Arc<Model>,
        mut devices: Devices,
        cfg: &SessionConfig,
    ) -> Result<Session, SessionError> {
        let hp = model.hparams().clone();
        if devices.placement().n_layer() != hp.n_layer {
            return Err(SessionError::Config(format!(
                "placement has {} layers, the model {}",
                devices.placement().n_layer(),
                hp.n_layer
            )));
        }
        let (n_ctx, n_batch) = cfg.shape(&hp)?;

        let Uploaded {
            global,
            layers,
            host_experts,
        } = upload(&model, &mut devices)?;
        let weights = ModelWeights::new(&model, &global, &layers);

        devices.alloc_hidden(n_batch, hp.n_embd)?;
        let mut scratch = vec![None; devices.n_devices()];
        for d in devices.placement().devices_used() {
            scratch[d] = Some(Scratch::alloc(&mut devices, d, &hp, n_batch)?);
        }
        // Every device's KV caches, checked together before any is made.
        for d in devices.placement().devices_used() {
            let n = (0..hp.n_layer)
                .filter(|&l| devices.device_of(Stage::Layer(l)) == d)
                .count();
            devices
                .backend(d)
                .check_kv(n, n_ctx, hp.k_width(), hp.v_width(), cfg.kv_type)?;
        }
        let kv = (0..hp.n_layer)
            .map(|l| {
                let d = devices.device_of(Stage::Layer(l));
                devices
                    .backend(d)
                    .alloc_kv(n_ctx, hp.k_width(), hp.v_width(), cfg.kv_type)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let caches = match devices.expert_slots() {
            Some(_) => expert_caches(&mut devices, host_experts, &hp, n_batch, cfg.threads)?,
            None => Vec::new(),
        };
        let head = devices.device_of(Stage::Head);
        let logits_dev = devices.alloc(head, HEAD_BLOCK, hp.n_vocab)?;
        Ok(Session {
            logits: vec![0.0; hp.n_vocab],
            all_logits: Vec::new(),
            model,
            devices,
            weights,
            kv,
            scratch,
            caches,
            logits_dev,
            pos: 0,
            n_ctx,
            n_batch,
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The position the next token goes to (tokens processed so far).
    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    pub fn n_batch(&self) -> usize {
        self.n_batch
    }

    pub fn devices(&self) -> &Devices {
        &self.devices
    }

    /// Hits and pairs of each layer's expert slot cache so far (none
    /// without `--moe-cache`).
    pub fn expert_stats(&self) -> Vec<LayerStats> {
        self.caches
            .iter()
            .flatten()
            .map(LayerCache::stats)
            .collect()
    }

    /// Forgets the sequence: the next token goes to position 0 (the caches
    /// are overwritten as positions are reused).
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Keeps the first `pos` positions of the sequence and forgets the
    /// rest (nothing when `pos` is past the current position): the next
    /// token goes to `pos`, attending to positions `0..pos` as they were
    /// computed. A conversation whose next turn shares a prefix with what
    /// was processed reuses that prefix this way.
    pub fn rewind(&mut self, pos: usize) {
        self.pos = self.pos.min(pos);
    }

    /// Processes a prompt (appended at the current position) and returns
    /// the last position's logits `[n_vocab]`.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<&[f32], SessionError> {
        self.forward(tokens, Outputs::Last, None)
    }

    /// Processes one token and returns its logits `[n_vocab]`.
    pub fn decode(&mut self, token: u32) -> Result<&[f32], SessionError> {
        self.forward(&[token], Outputs::Last, None)
    }

    /// Processes `tokens` at the current position in batches of `n_batch`,
    /// each batch one pass through the model, tapping into `sink` if given.
    /// Returns the logits `outputs` asks for: `[n_vocab]` for
    /// [`Outputs::Last`], `[tokens.len(), n_vocab]` for [`Outputs::All`],
    /// `[tokens.len() - k, n_vocab]` for [`Outputs::From`]`(k)`.
    ///
    /// On an error from the backend the session's position is unchanged but
    /// its caches may hold part of the batch; [`reset`](Self::reset) it.
    pub fn forward(
        &mut self,
        tokens: &[u32],
        outputs: Outputs,
        mut sink: Option<&mut dyn TraceSink>,
    ) -> Result<&[f32], SessionError> {
        let n_vocab = self.model.hparams().n_vocab;
        if tokens.is_empty() {
            return Err(SessionError::Empty);
        }
        if self.pos + tokens.len() > self.n_ctx {
            return Err(SessionError::ContextFull {
                pos: self.pos,
                n_tokens: tokens.len(),
                n_ctx: self.n_ctx,
            });
        }
        if let Some((index, &token)) = tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= n_vocab)
        {
            return Err(SessionError::TokenOutOfRange {
                token,
                index,
                n_vocab,
            });
        }
        // From this index of `tokens` on, every position gets logits.
        let from = match outputs {
            Outputs::Last => None,
            Outputs::All => Some(0),
            Outputs::From(k) if k < tokens.len() => Some(k),
            Outputs::From(k) => {
                return Err(SessionError::Config(format!(
                    "logits from index {k} of {} tokens",
                    tokens.len()
                )))
            }
        };
        if let Some(k) = from {
            self.all_logits.resize((tokens.len() - k) * n_vocab, 0.0);
        }
        let n_chunks = tokens.len().div_ceil(self.n_batch);
        let pool = self.devices.workers();
        let mut pos = self.pos;
        for (c, chunk) in tokens.chunks(self.n_batch).enumerate() {
            // This chunk's rows are tokens[off..off + len].
            let (off, len) = (pos - self.pos, chunk.len());
            let out = match from {
                Some(k) if k <= off => {
                    let start = (off - k) * n_vocab;
                    HeadOut::All(&mut self.all_logits[start..start + len * n_vocab])
                }
                Some(k) if k < off + len => {
                    HeadOut::From(k - off, &mut self.all_logits[..(off + len - k) * n_vocab])
                }
                Some(_) => HeadOut::Skip,
                None if c + 1 == n_chunks => HeadOut::Last(&mut self.logits),
                None => HeadOut::Skip,
            };
            let sink = sink.as_deref_mut().map(|s| s as &mut dyn TraceSink);
            let experts = self
                .caches
                .iter_mut()
                .map(|c| c.as_mut().map(|c| c as &mut dyn ExpertRunner))
                .collect();
            let mut step = Step::new(
                &mut self.devices,
                &self.scratch,
                self.logits_dev,
                sink,
                experts,
            );
            let (weights, model, kv) = (&self.weights, &*self.model, &self.kv[..]);
            let run = || weights.forward(model, &mut step, kv, chunk, pos, out);
            // One pool entry per step (see `Ops::workers`).
            match &pool {
                Some(p) => p.install(run)?,
                None => run()?,
            }
            pos += chunk.len();
        }
        self.pos = pos;
        Ok(match from {
            None => &self.logits,
            Some(_) => &self.all_logits,
        })
    }
}

/// Per layer, the host's gate, up and down experts of a layer that caches
/// them.
type HostExperts = Vec<Option<[WeightSource; 3]>>;

/// What [`upload`] prepared: the whole-model handles, each layer's, and
/// the experts left on the host.
struct Uploaded {
    global: RoleMap<Weight>,
    layers: Vec<RoleMap<Weight>>,
    host_experts: HostExperts,
}

/// Prepares every weight on the device that uses it: token_embd where the
/// embedding runs, output_norm and output where the head runs, each layer's
/// tensors where the layer runs, except the experts of a layer that caches
/// them ([`Devices::cached_slots`]), which stay mapped on the host. A
/// tensor needed on a device twice (a tied head on the embedding's device)
/// is prepared once.
fn upload(model: &Model, devices: &mut Devices) -> Result<Uploaded, BackendError> {
    use crate::model::Role;
    let file = model.file();
    let table = model.tensors();
    let mut done: HashMap<(usize, String), Weight> = HashMap::new();
    let mut put = |devices: &mut Devices, stage: Stage, info: &crate::gguf::TensorInfo| {
        let d = devices.device_of(stage);
        if let Some(&w) = done.get(&(d, info.name.clone())) {
            return Ok(w);
        }
        let w = devices
            .backend(d)
            .upload(&WeightSource::from_gguf(file, info))?;
        done.insert((d, info.name.clone()), w);
        Ok::<Weight, BackendError>(w)
    };
    let mut global = BTreeMap::new();
    for (&role, info) in &table.global {
        let stage = if role == Role::TokEmbd {
            Stage::Embed
        } else {
            Stage::Head
        };
        global.insert(role, put(devices, stage, info)?);
    }
    let mut layers = Vec::with_capacity(table.layers.len());
    let mut host = Vec::with_capacity(table.layers.len());
    for (l, map) in table.layers.iter().enumerate() {
        let cached = devices.cached_slots(l).is_some();
        let mut m = BTreeMap::new();
        for (&role, info) in map {
            if !(cached && role.is_expert_matrix()) {
                m.insert(role, put(devices, Stage::Layer(l), info)?);
            }
        }
        host.push(cached.then(|| {
            [Role::FfnGateExps, Role::FfnUpExps, Role::FfnDownExps]
                .map(|r| WeightSource::from_gguf(file, &map[&r]))
        }));
        layers.push(RoleMap::new(format!("layer {l}"), m));
    }
    Ok(Uploaded {
        global: RoleMap::new("model", global),
        layers,
        host_experts: host,
    })
}

/// The expert slot caches of the layers that have host experts, on the
/// GPU, with one set of buffers for `n_batch` rows, and the host device
/// that multiplies the missed experts ([`HostDevice`]: on the CPU
/// backend's threads, or on `threads` threads of its own, 0: one per core).
fn expert_caches(
    devices: &mut Devices,
    host: HostExperts,
    hp: &Hparams,
    n_batch: usize,
    threads: usize,
) -> Result<Vec<Option<LayerCache>>, BackendError> {
    let (Some(n_slots), Some(_)) = (devices.expert_slots(), hp.moe) else {
        return Ok(Vec::new());
    };
    let Some(l0) = host.iter().position(Option::is_some) else {
        return Ok(Vec::new());
    };
    let gpu = devices.device_of(Stage::Layer(l0));
    let bufs = CacheBufs::alloc(devices, gpu, hp, n_batch)?;
    let host_device = HostDevice::new(devices, hp, n_batch, threads)?;
    host.into_iter()
        .enumerate()
        .map(|(l, h)| {
            h.map(|h| {
                LayerCache::new(
                    l,
                    h,
                    n_slots,
                    devices.backend(gpu),
                    bufs,
                    Arc::clone(&host_device),
                )
            })
            .transpose()
        })
        .collect()
}
