//! [`open_devices`]: the backends and the table a request asks for,
//! checked against the GPU's memory before anything is loaded.

use super::bytes::{expert_bytes, ModelBytes};
use super::fit::{auto_fit, largest_fit};
use super::plan::{mib, AutoFit, Plan};
use super::request::GpuRequest;
use crate::cpu::CpuBackend;
use crate::model::Model;
use crate::ops::{BackendError, KvType, Ops};
use crate::placement::{Devices, Placement, Side};
use crate::vulkan::VulkanBackend;

/// The Vulkan device `req` selects, its memory budget lowered to
/// `req.memory_limit` when that is less.
fn open_gpu(req: &GpuRequest) -> Result<VulkanBackend, BackendError> {
    let mut gpu = VulkanBackend::new(&req.vk).map_err(|e| BackendError::Device {
        backend: "vulkan".into(),
        message: e.to_string(),
    })?;
    if let Some(m) = req.memory_limit {
        gpu.set_memory_budget(m.min(gpu.memory_budget()));
    }
    Ok(gpu)
}

/// The devices `req` asks for, for `model` with a session of `n_ctx`
/// positions and `n_batch` rows: the table of
/// [`Placement::gpu_split`], checked against the GPU's device-local
/// memory before anything is loaded (an error names the largest `-g`
/// that fits), and the [`Plan`]. With `-g auto` the GPU is opened
/// first and the table is the largest that fits ([`auto_fit`]).
pub fn open_devices(
    model: &Model,
    req: &GpuRequest,
    n_ctx: usize,
    n_batch: usize,
    kv_type: KvType,
) -> Result<(Devices, Plan), BackendError> {
    let n_layer = model.hparams().n_layer;
    // The expert slots of each GPU layer with `n_gpu` of them.
    let slots = |n_gpu: usize| match (req.moe_cache, model.hparams().moe) {
        (Some(c), Some(m)) if n_gpu > 0 => Some(c.slots(m.n_expert, expert_bytes(model), n_gpu)),
        _ => None,
    };
    let model_bytes = |expert_slots: Option<usize>| {
        let m = ModelBytes::of(model, n_ctx, n_batch, kv_type);
        match expert_slots {
            Some(n) => m.with_expert_slots(model, n, n_batch),
            None => m,
        }
    };
    let mut opened = None;
    let mut auto = None;
    let n_gpu = match req.gpu_layers.count(n_layer) {
        Some(n) => n,
        None => {
            let gpu = open_gpu(req)?;
            let limit = gpu.memory_budget();
            // Nothing fits only when --fixed-on gpu puts more than the
            // limit there: then -g 0's table, refused below.
            let fit = auto_fit(n_layer, req.fixed_on, limit, |n| model_bytes(slots(n)));
            let layers = fit.unwrap_or(0);
            opened = Some(gpu);
            auto = Some(AutoFit { layers, limit });
            layers
        }
    };
    let table = Placement::gpu_split(n_layer, n_gpu, req.fixed_on);
    let expert_slots = slots(n_gpu);
    let bytes = model_bytes(expert_slots).budget(&table);
    let (placement, kinds) = table.compact();
    let mut backends: Vec<Box<dyn Ops>> = Vec::new();
    let (mut names, mut limits, mut per_dev) = (Vec::new(), Vec::new(), Vec::new());
    for &k in &kinds {
        let b = bytes[k];
        if k == Side::Gpu as usize {
            let gpu = match opened.take() {
                Some(gpu) => gpu,
                None => open_gpu(req)?,
            };
            let limit = gpu.memory_budget();
            if b.total() > limit {
                let m = model_bytes(expert_slots);
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
        auto,
    };
    let mut devices = Devices::new(backends, placement);
    let gpu = kinds.iter().position(|&k| k == Side::Gpu as usize);
    if let (Some(gpu), Some(n)) = (gpu, expert_slots) {
        devices.cache_experts(gpu, n);
    }
    Ok((devices, plan))
}
