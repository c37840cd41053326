//! Where a model runs: `-g N`, `--device`, `--validate` (shared by the
//! generation and bench commands).

use std::sync::Arc;

use clap::Args;

use super::CliError;
use crate::model::Model;
use crate::placement::Devices;
use crate::session::{Session, SessionConfig};
use crate::vulkan::VulkanOptions;

#[derive(Args, Clone, Debug, Default)]
pub struct DeviceArgs {
    /// Layers on the GPU (Vulkan): 0 none (CPU only), -1 all (embedding,
    /// every layer and the output head), N the embedding and the first N
    /// layers (the rest and the head on the CPU).
    #[arg(
        short = 'g',
        long = "gpu-layers",
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true,
        value_parser = gpu_layers
    )]
    pub gpu_layers: i64,
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
        if self.gpu_layers == 0 && (self.device.is_some() || self.validate) {
            return Err(CliError::Usage(
                "--device and --validate apply to the GPU: give -g -1 or -g N".into(),
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
        let devices = Devices::with_gpu(model.hparams().n_layer, self.gpu_layers, cfg.threads, &vk)
            .map_err(|e| CliError::Session(e.into()))?;
        Ok(Session::with_devices(model, devices, cfg)?)
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
