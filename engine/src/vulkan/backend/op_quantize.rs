//! Activations quantized on the device to a block weight type's dot format
//! (ggml's `vec_dot_type`: Q8_0, Q8_1 or Q8_K), bit for bit as the CPU's
//! quantizer ([`crate::cpu::act`]), for the integer products of
//! `op_matmul.rs` and `op_matmul_id.rs` (`shaders/quantize_act.comp`;
//! layouts in `shaders/common/act.glsl`).
//!
//! The quantized rows of an activation buffer live in a buffer of its own,
//! its twin (made at its first quantization, [`twin_bytes`] long: what
//! `setup::bytes` counts for every GPU activation buffer), at the block
//! index of the rows' first element, so that every view of the buffer has
//! its own place. A twin remembers what it holds: a product whose input
//! was quantized to the same format since the last submission, and not
//! written since (Q, K and V of one norm output; gate and up), reads it
//! again.

use std::collections::HashMap;
use std::ops::Range;

use super::cmd::Op;
use super::{Bind, VulkanBackend};
use crate::fault;
use crate::ggml_type::GgmlType;
use crate::ops::Act;
use crate::vulkan::push::QuantizePush;
use crate::vulkan::{shaders, PushConstants, Shader};

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

/// Bytes of the twin of an activation buffer of `elems` f32 elements:
/// room for any of the formats (Q8_K's 292 bytes per 256 elements is the
/// most), whole blocks.
pub fn twin_bytes(elems: u64) -> u64 {
    elems.div_ceil(256) * 292
}

/// What a twin holds: its source's bytes `src` in `fmt` at its bytes `at`,
/// as quantized by the command at `cmd` of the list of submission `gen`.
#[derive(Clone, Debug)]
struct Held {
    src: Range<u64>,
    at: Range<u64>,
    fmt: GgmlType,
    cmd: usize,
    gen: usize,
}

/// A twin: its buffer slot and what it holds.
struct Twin {
    slot: u32,
    held: Vec<Held>,
}

/// The backend's twins, by source buffer slot.
#[derive(Default)]
pub(super) struct ActScratch {
    twins: HashMap<u32, Twin>,
}

/// Where quantized activations are: a binding for the products and the
/// first u32 word of the rows.
pub(super) struct Quantized {
    pub bind: Bind,
    pub word0: u32,
}

/// Whether `x`'s twin holds it in `fmt`, quantized in this submission with
/// no write to `x` recorded since.
pub(super) fn holds(b: &VulkanBackend, x: Act, fmt: GgmlType) -> bool {
    let elems = x.elems();
    let src = elems.start as u64 * 4..elems.end as u64 * 4;
    let gen = b.stats.submissions;
    let Some(twin) = b.act_scratch.twins.get(&x.id()) else {
        return false;
    };
    twin.held.iter().any(|h| {
        h.src == src
            && h.fmt == fmt
            && h.gen == gen
            && h.cmd < b.cmds.len()
            && !b.cmds[h.cmd + 1..].iter().any(|c| {
                c.access().iter().any(|a| {
                    a.write && a.buf == x.id() && a.range.start < src.end && src.start < a.range.end
                })
            })
    })
}

/// `x` (whole rows, a multiple of the block size per row) in `fmt` on the
/// device: quantized now, or where its twin already holds it.
pub(super) fn quantized(b: &mut VulkanBackend, x: Act, fmt: GgmlType) -> Option<Quantized> {
    let (bb, per) = block_layout(fmt);
    let elems = x.elems();
    assert!(
        x.width().is_multiple_of(per) && elems.start.is_multiple_of(per),
        "quantize: rows of {} are not whole {}-element blocks",
        x.width(),
        per
    );
    let src = elems.start as u64 * 4..elems.end as u64 * 4;
    let at = (elems.start / per * bb) as u64..(elems.end / per * bb) as u64;
    let gen = b.stats.submissions;
    if !b.act_scratch.twins.contains_key(&x.id()) {
        let bytes = twin_bytes(b.buffer_bytes(x.id()) / 4);
        match b.new_buffer("quantized activations", bytes, false, false) {
            Ok(slot) => {
                b.act_scratch.twins.insert(
                    x.id(),
                    Twin {
                        slot,
                        held: Vec::new(),
                    },
                );
            }
            Err(e) => {
                let e = b.vk_err("quantized activations", bytes, e);
                b.fail(e);
                return None;
            }
        }
    }
    let twin = &b.act_scratch.twins[&x.id()];
    let slot = twin.slot;
    let bind = Bind {
        buf: slot,
        bytes: at.clone(),
    };
    let word0 = u32::try_from(at.start / 4).expect("twin offsets fit u32");
    if holds(b, x, fmt) {
        return Some(Quantized { bind, word0 });
    }
    let sh = shader(fmt);
    let push = QuantizePush {
        n_seg: u32::try_from(elems.len() / 32).expect("activations fit u32"),
        x_offset: u32::try_from(elems.start).expect("activations fit u32"),
        out_offset: word0,
    };
    // Q8_0 / Q8_1: eight invocations per segment (one per word of
    // quants); Q8_K: one.
    let per_seg = if fmt == GgmlType::Q8_K { 1 } else { 8 };
    let groups = b.groups_1d(sh, u64::from(push.n_seg) * per_seg);
    let binds = [Bind::act(x), bind.clone()];
    let tag = Op::Quantize { fmt, push };
    b.dispatch_op(tag, sh, &binds, push.as_bytes().to_vec(), groups);
    let cmd = b.cmds.len().saturating_sub(1);
    let twin = b.act_scratch.twins.get_mut(&x.id()).expect("made above");
    twin.held
        .retain(|h| h.at.end <= at.start || at.end <= h.at.start);
    twin.held.push(Held {
        src,
        at,
        fmt,
        cmd,
        gen,
    });
    Some(Quantized { bind, word0 })
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
