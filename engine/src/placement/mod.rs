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
//! This is the runtime, below the model code: it knows backends and stages,
//! not models. Which table a model gets, and what each device will hold,
//! is decided above the model code, in [`crate::setup`]
//! (`setup::open_devices`). The model code is the same in every case.
//!
//! - `table.rs`: [`Side`], [`Stage`], [`Placement`].
//! - `devices.rs`: [`Devices`] and [`Devices::handoff`].

mod devices;
mod table;

pub use devices::Devices;
pub use table::{Placement, Side, Stage};
