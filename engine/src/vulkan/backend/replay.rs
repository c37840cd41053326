//! Replaying a recorded submission: a decode step records the same
//! commands at every position (positions and token ids live in the inbox,
//! not in push constants: `shaders/common/step.glsl`), so the command
//! buffer of one step, its barriers placed by the same hazard tracking, is
//! submitted again for the next one with only the inbox rewritten. The host
//! then records nothing: no descriptor sets, no barriers, no command pool.
//!
//! What must match for a replay: the plain command list (ops, shaders,
//! buffers, push bytes, workgroups, accessed ranges), the inbox's length,
//! the host read at the end, the switches of the fusion pass that turns
//! the plain list into the one recorded (the rules turned off, the
//! subgroup twins), and the faults that change how a list is fused or
//! recorded. Anything
//! else records afresh; a fresh recording replaces the kept one. Buffer
//! slots are never replaced while a recording is kept (the staging buffers
//! are only regrown on a fresh recording, after the kept one is dropped),
//! so the recorded handles are those of the slots.

use super::cmd::Cmd;
use super::fuse::Unfused;
use crate::fault;
use crate::vulkan::Submission;

/// What a recorded submission was recorded from.
#[derive(PartialEq)]
pub(super) struct Key {
    pub cmds: Vec<Cmd>,
    pub staged_len: usize,
    /// The host read at the end: buffer, byte offset, bytes.
    pub read: Option<(u32, u64, u64)>,
    /// The fusion rules turned off, and whether the fused matvecs run
    /// their subgroup twins.
    pub fusion: (Unfused, bool),
    /// Faults that change the recording itself or the fusion pass.
    pub faults: [bool; FAULTS.len()],
}

/// The faults that change the recording itself (`missing-barrier`,
/// `descriptor-reuse`) or what the fusion pass makes of a list.
const FAULTS: [&str; 8] = [
    "missing-barrier",
    "descriptor-reuse",
    "gpu-act-f16-truncate",
    "gpu-post-norm-add",
    "gpu-softmax-unshifted",
    "gpu-qkv-merge",
    "gpu-ffn-bind",
    "gpu-oproj-residual",
];

impl Key {
    pub fn new(
        cmds: Vec<Cmd>,
        staged_len: usize,
        read: Option<(u32, u64, u64)>,
        fusion: (Unfused, bool),
    ) -> Key {
        Key {
            cmds,
            staged_len,
            read,
            fusion,
            faults: FAULTS.map(fault::active),
        }
    }
}

/// A completed submission kept for replay, with its counts.
pub(super) struct Replay {
    pub key: Key,
    pub sub: Submission<'static>,
    pub dispatches: usize,
    pub barriers: usize,
}
