//! Whole models on the CPU and the test device: the placement request, and
//! the logits of a prefill and decode steps with the validation layer
//! watching.

use std::path::Path;
use std::sync::Arc;

use engine::model::Model;
use engine::session::{Outputs, Session, SessionConfig};
use engine::setup::GpuRequest;

use super::options;

/// `gpu_layers` layers (-1: all, as `-g` takes it) on the test device with validation, 2 CPU
/// threads, nothing else asked for (set other fields with `..request(n)`).
pub fn request(gpu_layers: i64) -> GpuRequest {
    GpuRequest {
        gpu_layers: gpu_layers.try_into().expect("-1, 0 or N"),
        threads: 2,
        vk: options(),
        ..GpuRequest::default()
    }
}

/// The model file at `path`.
pub fn load(path: &Path) -> Arc<Model> {
    Arc::new(Model::load(path).unwrap())
}

/// The logits of every position of `toks`, then of one decode step per
/// token of `decode`, with `m` placed as `req` asks; fails on any
/// validation message. The session too (for its counters).
pub fn logits(
    m: &Arc<Model>,
    req: &GpuRequest,
    toks: &[u32],
    decode: &[u32],
) -> (Vec<f32>, Session) {
    let cfg = SessionConfig::default();
    let (mut s, plan) = Session::on_devices(Arc::clone(m), req, &cfg).unwrap();
    let mut out = s.forward(toks, Outputs::All, None).unwrap().to_vec();
    for &t in decode {
        out.extend_from_slice(s.decode(t).unwrap());
    }
    let msgs = s.devices().validation_messages();
    assert!(msgs.is_empty(), "{plan}: {msgs:?}");
    (out, s)
}
