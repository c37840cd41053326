//! Where a model runs: `-g N`, `--fixed-on`, `--device`, `--validate`,
//! `--print-plan` (shared by the generation and bench commands).

use std::sync::Arc;

use clap::Args;

use super::CliError;
use crate::model::Model;
use crate::placement::{GpuRequest, Side};
use crate::session::{Session, SessionConfig};
use crate::vulkan::VulkanOptions;

#[derive(Args, Clone, Debug, Default)]
pub struct DeviceArgs {
    /// Layers on the GPU (Vulkan): 0 none (CPU only), -1 all (embedding,
    /// every layer and the output head), N the embedding and the first N
    /// layers (the rest and the head on the CPU). Checked against the
    /// device-local memory before loading: a GPU part that does not fit is
    /// an error that names the largest N that does.
    #[arg(
        short = 'g',
        long = "gpu-layers",
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true,
        value_parser = gpu_layers
    )]
    pub gpu_layers: i64,
    /// Where the token embedding and the output head run, whatever -g says
    /// (default: the embedding on the GPU when any layer is, the head with
    /// the last layer).
    #[arg(long = "fixed-on", value_name = "cpu|gpu")]
    pub fixed_on: Option<Side>,
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
}

/// `-1` or a count.
fn gpu_layers(s: &str) -> Result<i64, String> {
    match s.parse::<i64>() {
        Ok(n) if n >= -1 => Ok(n),
        _ => Err(format!(
            "invalid -g {s:?}: expected -1 (all layers), 0 (CPU only) or a layer count"
        )),
    }
}

impl DeviceArgs {
    /// A session of `model` on the devices these flags select.
    pub fn session(&self, model: Arc<Model>, cfg: &SessionConfig) -> Result<Session, CliError> {
        let gpu = self.gpu_layers != 0 || self.fixed_on == Some(Side::Gpu);
        if !gpu && (self.device.is_some() || self.validate) {
            return Err(CliError::Usage(
                "--device and --validate apply to the GPU: give -g -1, -g N or --fixed-on gpu"
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
        };
        let req = GpuRequest {
            gpu_layers: self.gpu_layers,
            fixed_on: self.fixed_on,
            threads: cfg.threads,
            vk,
            memory_limit: None,
        };
        let (session, plan) = Session::on_devices(model, &req, cfg)?;
        if gpu || self.print_plan {
            eprintln!("{plan}");
        }
        Ok(session)
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
