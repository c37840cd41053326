//! Where a model runs: `-g N|auto`, `--fixed-on`, `--moe-cache`,
//! `--expert-stats`, `--device`, `--validate`, `--record-every-step`,
//! `--unfuse`, `--print-plan` (shared by the
//! generation and bench commands).

use std::sync::Arc;

use clap::Args;

use super::CliError;
use engine::expert_cache::CacheSize;
use engine::model::Model;
use engine::numerics::CpuNumerics;
use engine::placement::Side;
use engine::session::{Session, SessionConfig};
use engine::setup::{GpuLayers, GpuRequest};
use engine::vulkan::{Unfused, VulkanOptions};

#[derive(Args, Clone, Debug, Default)]
pub struct DeviceArgs {
    /// Layers on the GPU (Vulkan): 0 none (CPU only), -1 all (embedding,
    /// every layer and the output head), N the embedding and the first N
    /// layers (the rest and the head on the CPU), auto the largest N whose
    /// GPU part fits (the plan printed says which). Checked against the
    /// device-local memory before loading: a GPU part that does not fit is
    /// an error that names the largest N that does.
    #[arg(
        short = 'g',
        long = "gpu-layers",
        value_name = "N|auto",
        default_value_t = GpuLayers::None,
        allow_negative_numbers = true,
        value_parser = gpu_layers
    )]
    pub gpu_layers: GpuLayers,
    /// Where the token embedding and the output head run, whatever -g says
    /// (default: the embedding on the GPU when any layer is, the head with
    /// the last layer).
    #[arg(long = "fixed-on", value_name = "cpu|gpu")]
    pub fixed_on: Option<Side>,
    /// Keep the experts of the GPU layers of a mixture-of-experts model in
    /// host memory, with N expert slots per layer (or NMiB for the slots
    /// of all GPU layers) in device memory: experts in a slot are
    /// multiplied on the GPU, the others on the CPU, slots refilled least
    /// recently used first. Changes speed, not results.
    #[arg(long = "moe-cache", value_name = "N|NMiB")]
    pub moe_cache: Option<CacheSize>,
    /// With --moe-cache: print each cached layer's hit rate on stderr at
    /// the end.
    #[arg(long = "expert-stats")]
    pub expert_stats: bool,
    /// Print the plan (which device runs what, bytes per device) on stderr
    /// also when everything runs on the CPU (with a GPU it always is).
    #[arg(long)]
    pub print_plan: bool,
    /// The Vulkan device: an index or part of its name (default: a discrete
    /// GPU first, then integrated, virtual, CPU).
    #[arg(long = "device", value_name = "INDEX|NAME")]
    pub device: Option<String>,
    /// Run with VK_LAYER_KHRONOS_validation and synchronization validation;
    /// any message it reports fails the run (the count goes to stderr).
    #[arg(long)]
    pub validate: bool,
    /// Record every GPU submission afresh instead of replaying the
    /// recorded decode step at the next position (for comparing the cost
    /// of recording; the results are the same bits).
    #[arg(long = "record-every-step")]
    pub record_every_step: bool,
    /// Turn decode fusions of the GPU kernels off, for comparing their
    /// cost: a comma-separated list of fusion rule names (the `RULES` of
    /// engine's vulkan backend: add-norm, norm-add, norm-quant, glu-quant,
    /// rope-kv, norm-rope, norm-rope-scale, norm-rope-kv, matvec,
    /// matvec-add, matvec-post-norm, matvec-glu, matvec-rope, matvec-kv,
    /// qkv, ffn, oproj) and subgroups; the results are the same bits.
    #[arg(long = "unfuse", value_name = "LIST", value_parser = unfused)]
    pub unfuse: Option<Unfused>,
    /// How the CPU rounds RoPE, attention, SwiGLU and the router softmax:
    /// ggml (llama.cpp's CPU backend's arithmetic, bit for bit) or
    /// reference (each product rounded, sums in order, libm exp; a few
    /// ulps apart). The GPU is not affected.
    #[arg(
        long = "cpu-numerics",
        value_name = "ggml|reference",
        default_value_t = CpuNumerics::Ggml,
        value_parser = cpu_numerics
    )]
    pub cpu_numerics: CpuNumerics,
}

/// `ggml` or `reference` ([`CpuNumerics`]).
fn cpu_numerics(s: &str) -> Result<CpuNumerics, String> {
    s.parse()
}

/// A list of decode fusions ([`Unfused`]).
fn unfused(s: &str) -> Result<Unfused, String> {
    s.parse()
}

/// `-1`, `0`, a count or `auto` ([`GpuLayers`]).
fn gpu_layers(s: &str) -> Result<GpuLayers, String> {
    s.parse()
}

impl DeviceArgs {
    /// A session of `model` on the devices these flags select.
    pub fn session(&self, model: Arc<Model>, cfg: &SessionConfig) -> Result<Session, CliError> {
        let no_layers = self.gpu_layers == GpuLayers::None;
        let gpu = !no_layers || self.fixed_on == Some(Side::Gpu);
        if self.moe_cache.is_some() && no_layers {
            return Err(CliError::Usage(
                "--moe-cache caches the experts of GPU layers: give -g -1 or -g N".into(),
            ));
        }
        if self.expert_stats && self.moe_cache.is_none() {
            return Err(CliError::Usage("--expert-stats needs --moe-cache".into()));
        }
        if self.moe_cache.is_some() && model.hparams().moe.is_none() {
            return Err(CliError::Usage(
                "--moe-cache applies to a mixture-of-experts model; this one has none".into(),
            ));
        }
        if !gpu
            && (self.device.is_some()
                || self.validate
                || self.record_every_step
                || self.unfuse.is_some())
        {
            return Err(CliError::Usage(
                "--device, --validate, --record-every-step and --unfuse apply to the GPU: give -g -1, -g N or --fixed-on gpu"
                    .into(),
            ));
        }
        let vk = VulkanOptions {
            device: self
                .device
                .as_deref()
                .unwrap_or("")
                .parse()
                .expect("infallible"),
            validation: self.validate,
            record_every_step: self.record_every_step,
            unfused: self.unfuse.unwrap_or_default(),
            kernel_layout: None,
        };
        let req = GpuRequest {
            gpu_layers: self.gpu_layers,
            fixed_on: self.fixed_on,
            threads: cfg.threads,
            vk,
            memory_limit: None,
            moe_cache: self.moe_cache,
        };
        let (mut session, plan) = Session::on_devices(model, &req, cfg)?;
        session.set_cpu_numerics(self.cpu_numerics);
        if gpu || self.print_plan {
            eprintln!("{plan}");
        }
        Ok(session)
    }

    /// With `--expert-stats`: prints each cached layer's hit rate on
    /// stderr.
    pub fn report_experts(&self, session: &Session) {
        if !self.expert_stats {
            return;
        }
        let stats = session.expert_stats();
        let (hits, pairs) = stats
            .iter()
            .fold((0, 0), |(h, p), s| (h + s.hits, p + s.pairs));
        for s in &stats {
            eprintln!(
                "experts: layer {}: {} slots, {} of {} hits ({:.1}%)",
                s.layer,
                s.slots,
                s.hits,
                s.pairs,
                100.0 * s.hit_rate()
            );
        }
        let all = if pairs == 0 {
            1.0
        } else {
            hits as f64 / pairs as f64
        };
        eprintln!(
            "experts: all layers: {hits} of {pairs} hits ({:.1}%)",
            100.0 * all
        );
    }

    /// With `--validate`: prints the validation-message count and fails
    /// when there is any.
    pub fn check_validation(&self, session: &Session) -> Result<(), CliError> {
        if !self.validate {
            return Ok(());
        }
        let msgs = session.devices().validation_messages();
        eprintln!("validation: {} messages", msgs.len());
        match msgs.first() {
            None => Ok(()),
            Some(first) => Err(CliError::Usage(format!(
                "the Vulkan validation layer reported {} message(s); first: {first}",
                msgs.len()
            ))),
        }
    }
}
