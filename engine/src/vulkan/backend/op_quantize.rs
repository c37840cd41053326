//! Activations quantized on the device to a block weight type's dot format
//! (ggml's `vec_dot_type`: Q8_0, Q8_1 or Q8_K), bit for bit as the CPU's
//! quantizer ([`crate::cpu::act`]), for the integer products of
//! `op_matmul.rs` and `op_matmul_id.rs` (`shaders/quantize_act.comp`;
//! layouts in `shaders/common/act.glsl`).
//!
//! The quantized rows live in a scratch buffer of the backend, in
//! [`REGIONS`] regions used in turn, so that products reading one region do
//! not wait for the quantization of the next. A region remembers what it
//! holds: a product whose input was quantized to the same format since the
//! last submission, and not written since (Q, K and V of one norm output;
//! gate and up), reads the same region again.

use std::ops::Range;

use super::{Bind, VulkanBackend};
use crate::fault;
use crate::ggml_type::GgmlType;
use crate::ops::Act;
use crate::vulkan::{shaders, PushConstants, Shader};

/// Scratch regions used in turn.
const REGIONS: usize = 4;

/// The push block of `quantize_act.comp`: `n_seg` segments of 32 elements
/// from element `x_offset` of x, blocks written from word `out_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct QuantizePush {
    n_seg: u32,
    x_offset: u32,
    out_offset: u32,
}

const _: () = assert!(std::mem::size_of::<QuantizePush>() == 12);
const _: () = {
    assert!(shaders::QUANTIZE_Q8_0.push_constant_size == 12);
    assert!(shaders::QUANTIZE_Q8_1.push_constant_size == 12);
    assert!(shaders::QUANTIZE_Q8_K.push_constant_size == 12);
};

// SAFETY: repr(C), three u32 fields, 12 bytes (asserted above): no padding.
unsafe impl PushConstants for QuantizePush {}

/// The device format activations take to meet weights of type `w`: `None`
/// for the float types (their products read f32 activations), else ggml's
/// `vec_dot_type`.
pub(super) fn act_format(w: GgmlType) -> Option<GgmlType> {
    if w.block_elems() == 1 {
        return None;
    }
    crate::cpu::act::vec_dot_type(w)
}

/// Bytes of one device block of `fmt` and the elements it holds: ggml's
/// block, Q8_0's padded to 36 bytes (its scale in a word of its own).
pub fn block_layout(fmt: GgmlType) -> (usize, usize) {
    match fmt {
        GgmlType::Q8_0 | GgmlType::Q8_1 => (36, 32),
        GgmlType::Q8_K => (292, 256),
        other => panic!("no device activation format {}", other.name()),
    }
}

/// Device bytes of `elems` activations in `fmt` (whole blocks).
pub fn device_bytes(fmt: GgmlType, elems: usize) -> usize {
    let (bytes, per) = block_layout(fmt);
    elems / per * bytes
}

/// The quantizer of `fmt` (with fault `gpu-act-f16-truncate`, the variant
/// whose f16 scale is truncated).
fn shader(fmt: GgmlType) -> &'static Shader {
    let s = match fmt {
        GgmlType::Q8_0 => &shaders::QUANTIZE_Q8_0,
        GgmlType::Q8_1 => &shaders::QUANTIZE_Q8_1,
        GgmlType::Q8_K => &shaders::QUANTIZE_Q8_K,
        other => panic!("no device activation format {}", other.name()),
    };
    if fault::active("gpu-act-f16-truncate") {
        return truncating(s);
    }
    s
}

#[cfg(feature = "fault-injection")]
fn truncating(s: &'static Shader) -> &'static Shader {
    if s.name == shaders::QUANTIZE_Q8_0.name {
        &shaders::QUANTIZE_Q8_0_F16TRUNC
    } else if s.name == shaders::QUANTIZE_Q8_1.name {
        &shaders::QUANTIZE_Q8_1_F16TRUNC
    } else {
        s // Q8_K's scale is an f32
    }
}

#[cfg(not(feature = "fault-injection"))]
fn truncating(s: &'static Shader) -> &'static Shader {
    s
}

/// What one scratch region holds: `src`'s elements `elems` in `fmt`, as
/// quantized by the command at `cmd` of the list of submission `gen`.
#[derive(Clone, Debug)]
struct Held {
    src: u32,
    bytes: Range<u64>,
    fmt: GgmlType,
    cmd: usize,
    gen: usize,
}

/// The backend's scratch for quantized activations.
#[derive(Default)]
pub(super) struct ActScratch {
    /// Buffer slot and bytes per region (0: none yet).
    buf: Option<u32>,
    region_bytes: u64,
    next: usize,
    held: [Option<Held>; REGIONS],
}

/// Where quantized activations are: a binding for the products and the
/// first u32 word of the rows.
pub(super) struct Quantized {
    pub bind: Bind,
    pub word0: u32,
}

/// `x` (whole rows, a multiple of the block size per row) in `fmt` on the
/// device: quantized now, or the region that already holds it.
pub(super) fn quantized(b: &mut VulkanBackend, x: Act, fmt: GgmlType) -> Option<Quantized> {
    let (_, per) = block_layout(fmt);
    let elems = x.elems();
    assert!(
        x.width().is_multiple_of(per),
        "quantize: rows of {} are not whole {}-element blocks",
        x.width(),
        per
    );
    let need = device_bytes(fmt, elems.len()) as u64;
    let src_bytes = elems.start as u64 * 4..elems.end as u64 * 4;
    let gen = b.stats.submissions;
    // A region holding x in fmt, with no write to x recorded since.
    let found = (0..REGIONS).find(|&r| {
        b.act_scratch.held[r].as_ref().is_some_and(|h| {
            h.src == x.id()
                && h.bytes == src_bytes
                && h.fmt == fmt
                && h.gen == gen
                && h.cmd < b.cmds.len()
                && !b.cmds[h.cmd + 1..].iter().any(|c| {
                    c.access().iter().any(|a| {
                        a.write
                            && a.buf == x.id()
                            && a.range.start < src_bytes.end
                            && src_bytes.start < a.range.end
                    })
                })
        })
    });
    let s = &b.act_scratch;
    if let (Some(r), Some(buf)) = (found, s.buf) {
        let at = r as u64 * s.region_bytes;
        return Some(Quantized {
            bind: Bind {
                buf,
                bytes: at..at + need,
            },
            word0: (at / 4) as u32,
        });
    }
    if s.buf.is_none() || need > s.region_bytes {
        let region_bytes = need.next_power_of_two().max(4096);
        let slot = match b.new_buffer(
            "quantized activations",
            region_bytes * REGIONS as u64,
            false,
            false,
        ) {
            Ok(slot) => slot,
            Err(e) => {
                let e = b.vk_err("quantized activations", region_bytes * REGIONS as u64, e);
                b.fail(e);
                return None;
            }
        };
        b.act_scratch = ActScratch {
            buf: Some(slot),
            region_bytes,
            ..ActScratch::default()
        };
    }
    let s = &mut b.act_scratch;
    let buf = s.buf.expect("made above");
    let r = s.next;
    s.next = (r + 1) % REGIONS;
    let at = r as u64 * s.region_bytes;
    let out = Bind {
        buf,
        bytes: at..at + need,
    };
    let sh = shader(fmt);
    let push = QuantizePush {
        n_seg: u32::try_from(elems.len() / 32).expect("activations fit u32"),
        x_offset: u32::try_from(elems.start).expect("activations fit u32"),
        out_offset: (at / 4) as u32,
    };
    let groups = b.groups_1d(sh, u64::from(push.n_seg));
    b.dispatch(sh, &[Bind::act(x), out.clone()], &push, groups);
    let cmd = b.cmds.len().saturating_sub(1);
    b.act_scratch.held[r] = Some(Held {
        src: x.id(),
        bytes: src_bytes,
        fmt,
        cmd,
        gen,
    });
    Some(Quantized {
        bind: out,
        word0: push.out_offset,
    })
}

/// For tests: `x` quantized to `fmt` on the device, read back in ggml's
/// block bytes (Q8_0's padding dropped), or the first recording error.
pub(super) fn read_quantized(
    b: &mut VulkanBackend,
    x: Act,
    fmt: GgmlType,
) -> Result<Vec<u8>, crate::ops::BackendError> {
    let q = quantized(b, x, fmt);
    if let Some(e) = b.error.take() {
        return Err(e);
    }
    let q = q.expect("no error: quantized");
    let words = (q.bind.bytes.end - q.bind.bytes.start) as usize / 4;
    let mut raw = vec![0f32; words];
    b.flush(Some((q.bind.buf, q.bind.bytes.start, &mut raw)))?;
    let bytes: Vec<u8> = raw.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    Ok(match fmt {
        GgmlType::Q8_0 => bytes
            .chunks_exact(36)
            .flat_map(|b| b[..2].iter().chain(&b[4..]).copied().collect::<Vec<_>>())
            .collect(),
        _ => bytes,
    })
}
