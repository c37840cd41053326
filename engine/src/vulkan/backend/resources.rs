//! What the backend's handles stand for on the device: weights split into
//! chunks, KV caches, buffer slots, and the byte ranges a dispatch binds.

use std::ops::Range;
use std::sync::Arc;

use crate::ggml_type::GgmlType;
use crate::ops::{Act, KvType};
use crate::vulkan::Buffer;

/// One chunk of a weight: rows `row0..row0 + rows`, in buffer `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightChunk {
    pub buf: u32,
    pub row0: usize,
    pub rows: usize,
}

/// A weight on the device: `n_out` rows of `n_in` elements of `ty`, in
/// ggml's block layout, split into chunks of whole rows.
#[derive(Clone, Debug)]
pub struct GpuWeight {
    pub name: String,
    pub ty: GgmlType,
    pub n_in: usize,
    pub n_out: usize,
    /// Bytes of one row.
    pub row_bytes: usize,
    pub chunks: Vec<WeightChunk>,
}

/// A KV cache on the device: `k` `[n_ctx, k_width]` and `v` `[n_ctx,
/// v_width]`, f32 or f16 (two halves per 32-bit word, low half first).
#[derive(Clone, Copy, Debug)]
pub struct GpuKv {
    pub k: u32,
    pub v: u32,
    pub n_ctx: usize,
    pub k_width: usize,
    pub v_width: usize,
    pub ty: KvType,
}

impl GpuKv {
    /// Bytes per element.
    pub fn elem_bytes(&self) -> u64 {
        self.ty.elem_bytes() as u64
    }
}

/// A buffer bound to one binding of a dispatch, and the bytes of it the
/// dispatch touches (for the hazard tracker; the whole buffer is bound).
/// Whether it is read or written comes from the shader's reflection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub buf: u32,
    pub bytes: Range<u64>,
}

impl Bind {
    /// The rows of an activation view.
    pub fn act(a: Act) -> Bind {
        let e = a.elems();
        Bind {
            buf: a.id(),
            bytes: e.start as u64 * 4..e.end as u64 * 4,
        }
    }

    /// Word `at` of the inbox (a position the host staged:
    /// [`VulkanBackend::stage_u32`](super::VulkanBackend::stage_u32)).
    pub fn step(at: u32) -> Bind {
        let at = u64::from(at) * 4;
        Bind {
            buf: super::INBOX,
            bytes: at..at + 4,
        }
    }

    /// Inbox words `a` and `b` and all between them (two positions one
    /// shader reads).
    pub fn steps(a: u32, b: u32) -> Bind {
        let (lo, hi) = (a.min(b), a.max(b));
        Bind {
            bytes: Bind::step(lo).bytes.start..Bind::step(hi).bytes.end,
            ..Bind::step(lo)
        }
    }

    /// A whole weight chunk.
    pub fn chunk(w: &GpuWeight, c: &WeightChunk) -> Bind {
        Bind {
            buf: c.buf,
            bytes: 0..(c.rows * w.row_bytes) as u64,
        }
    }
}

/// A buffer slot of the backend: empty (a staging buffer not made yet) or
/// a device buffer.
pub(super) struct Slot {
    /// Shared with a submission still running that records it.
    pub(super) buffer: Option<Arc<Buffer>>,
    /// Bytes ops may use (the sentinel tail follows).
    pub(super) usable: u64,
    pub(super) sentinel: bool,
}
