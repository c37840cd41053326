//! Setting a model up on its devices, above the model code: what `-g`,
//! `--fixed-on` and `--moe-cache` ask for ([`GpuRequest`], [`GpuLayers`]),
//! what each device will hold ([`ModelBytes`], [`ModelBytes::budget`]:
//! weights by placement, KV caches, scratch), how many layers fit
//! ([`largest_fit`], [`auto_fit`] for `-g auto`), and the backends and
//! table that result ([`open_devices`], with the [`Plan`] that says
//! which device runs what and how many bytes it holds).
//!
//! [`open_devices`] builds the table from `-g` and `--fixed-on`
//! ([`Placement::gpu_split`]): layers `0..N` on the Vulkan device (all of
//! them for -1; for `auto`, the most whose GPU part fits), the rest on the
//! CPU, the embedding and the output head where `--fixed-on` says (by
//! default the embedding on the GPU when any layer is, the head with the
//! last layer). Before anything is loaded it adds up what each device will
//! hold and refuses, in one line that names the largest `-g` that fits, a
//! plan whose GPU part exceeds the device-local memory.
//!
//! The runtime these build, [`Devices`] and its [`Placement`] table, sits
//! below the model code in [`crate::placement`]; this module may import
//! the model, nothing in the model imports it.
//!
//! - `request.rs`: [`GpuLayers`], [`GpuRequest`].
//! - `bytes.rs`: [`DeviceBytes`], [`ModelBytes`], [`expert_bytes`],
//!   [`ModelBytes::budget`].
//! - `fit.rs`: [`largest_fit`], [`auto_fit`].
//! - `plan.rs`: [`Plan`] and how it prints.
//! - `open.rs`: [`open_devices`].

mod bytes;
mod fit;
mod open;
mod plan;
mod request;

pub use bytes::{expert_bytes, DeviceBytes, ModelBytes, BUFFER_SLACK};
pub use fit::{auto_fit, largest_fit};
pub use open::open_devices;
pub use plan::{AutoFit, Plan};
pub use request::{GpuLayers, GpuRequest};

#[cfg(doc)]
use crate::placement::{Devices, Placement};
