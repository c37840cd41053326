//! Attention through the KV cache on the device.
//!
//! Two steps per call: this batch's K and V rows go into the cache
//! (`shaders/kv_write.comp`: a copy for an f32 cache, rounding to nearest
//! even for an f16 one), then `shaders/attention.comp` runs one workgroup per
//! (head, query row) over the visible cache positions, with an online
//! softmax over tiles of keys (a batch of rows on the GPU layout:
//! `shaders/attention_rows.comp`, one workgroup per (head, 16 rows), the
//! same arithmetic per row; through an f16 cache, where the device has
//! cooperative matrices and the batch's positions make two runs of keys or
//! more, `shaders/attention_coop.comp` in runs of keys and
//! `shaders/attention_combine_rows.comp` after it, [`coop_split`]). The
//! hazard tracker orders the two: the attention reads the cache bytes the
//! write wrote. On CPU implementations ([`KernelLayout::Cpu`]) kernels
//! with no shared memory and no barrier run instead where the head dims
//! allow: `shaders/attention_cpu.comp` for
//! batches of 8 query rows or more (one invocation per (query row, head),
//! the keys and values shared by shuffles; on lavapipe 4x faster, and more
//! for long prompts), `shaders/attention_keys_cpu.comp` for fewer (decode:
//! one subgroup per (head, query row), its lanes splitting the keys).
//!
//! The position is staged in the inbox, not pushed, and every command
//! declares the whole cache as what it writes or reads: a decode step's
//! commands are then the same at every position, and a recorded step
//! replays ([`super::replay`]).

use super::cmd::Op;
use super::fuse;
use super::{Bind, Cmd, GpuKv, KernelLayout, VulkanBackend};
use crate::fault;
use crate::ops::{Act, AttnParams, Kv, KvType};
use crate::vulkan::push::{AttnPush, CombinePush, KvWritePush};
use crate::vulkan::{shaders, PushConstants};

/// Workgroup size of `attention.comp` (`WG`).
const ATTN_WG: usize = 64;
/// Output dimensions per invocation of `attention.comp` (`ACC`).
const ATTN_ACC: usize = 8;
/// Query rows per workgroup of `attention_rows.comp` (`BR`).
const ATTN_ROWS: usize = 16;
/// Largest head dims of `attention_rows.comp` (`MAX_D`); larger ones take
/// `attention.comp`, a workgroup per row.
const ROWS_MAX_HEAD_DIM: usize = 256;
/// `attention_coop.comp` takes head dims in multiples of this (the
/// matrices' side) up to [`COOP_MAX_HEAD_DIM`] (its larger `MAX_D`).
const COOP_HEAD_DIM_STEP: usize = 16;
const COOP_MAX_HEAD_DIM: usize = 128;
/// `attention_coop.comp` takes the keys in runs until the dispatch has
/// about this many workgroups (in one run a workgroup holds an H200 SM's
/// warps for the whole of its keys: two subgroups a workgroup, 144
/// workgroups for SmolLM2's 512 rows, took 342 us a dispatch at depth 2048
/// against the rows kernel's 303, and 173 us in runs; 2,048 workgroups
/// were no faster)...
const COOP_TARGET_GROUPS: usize = 1024;
/// ... with runs of at least this many keys (the positions a run starts at
/// are multiples of [`COOP_SPLIT_STEP`], a multiple of both variants'
/// tiles),...
const COOP_MIN_SPLIT_KEYS: usize = 256;
const COOP_SPLIT_STEP: usize = 64;
/// ... and partials of at most this many bytes. Fewer than two runs: the
/// other kernels.
const COOP_MAX_PARTIAL_BYTES: usize = 64 << 20;

/// `attention_coop.comp`'s variant for head dims up to 128 (`d128`) or up
/// to 64.
fn coop_shader(d128: bool) -> &'static shaders::Shader {
    if d128 {
        &shaders::ATTENTION_COOP_D128
    } else {
        &shaders::ATTENTION_COOP_D64
    }
}

/// Bytes of one run's partials: O, m and l for `t` rows of `n_head` heads
/// of `dv`.
fn coop_run_bytes(t: usize, n_head: usize, dv: usize) -> usize {
    t * n_head * (dv + 2) * 4
}

/// The runs of keys of `attention_coop.comp` (`shader`) for `t` rows of
/// `n_head` heads of `dv` over positions 0 .. `keys`: (runs, keys per
/// run), or None where that is fewer than two runs.
fn coop_runs(
    shader: &shaders::Shader,
    t: usize,
    n_head: usize,
    dv: usize,
    keys: usize,
) -> Option<(usize, usize)> {
    // 16 rows a subgroup of 32.
    let rows = shader.local_size[0] as usize / 2;
    let groups = n_head * t.div_ceil(rows);
    let bytes_per_run = coop_run_bytes(t, n_head, dv);
    let n_split = COOP_TARGET_GROUPS
        .div_ceil(groups)
        .min(keys.div_ceil(COOP_MIN_SPLIT_KEYS))
        .min(COOP_MAX_PARTIAL_BYTES / bytes_per_run.max(1));
    let split_keys = keys
        .div_ceil(n_split.max(1))
        .next_multiple_of(COOP_SPLIT_STEP);
    let n_split = keys.div_ceil(split_keys);
    (n_split >= 2).then_some((n_split, split_keys))
}
/// Largest `head_dim_k` of `attention.comp` (`MAX_DK`).
pub const MAX_HEAD_DIM_K: usize = 512;
/// Largest `head_dim_v` of `attention.comp`.
pub const MAX_HEAD_DIM_V: usize = ATTN_WG * ATTN_ACC;
/// Split-K decode: one run of keys per this many visible positions (a
/// decode step past them takes `attention.comp` SPLIT, whose last run of
/// each head weighs the runs together), at most [`MAX_SPLITS`] runs. The
/// count changes every `SPLIT_KEYS` positions, so a replayed step is
/// recorded again only then.
const SPLIT_KEYS: usize = 64;
/// (`MAX_SPLIT` of `shaders/attention.comp` holds as many.)
pub const MAX_SPLITS: usize = 64;

/// Words of the split-K partials of `n_head` heads of `head_dim_v` (one
/// decode row, [`MAX_SPLITS`] runs); the heads' counters follow them.
fn partial_words(n_head: usize, head_dim_v: usize) -> usize {
    n_head * MAX_SPLITS * (head_dim_v + 2)
}

/// Bytes of the split-K partials and counters of a model with `n_head`
/// heads of `head_dim_v`: what `setup::bytes` counts for the GPU.
pub fn attention_partial_bytes(n_head: usize, head_dim_v: usize) -> u64 {
    ((partial_words(n_head, head_dim_v) + n_head) * 4) as u64
}
/// `attention_cpu.comp` takes head dims in multiples of this (8 lanes x 4)
/// up to [`CPU_MAX_HEAD_DIM`] (`MAX_D`).
const CPU_HEAD_DIM_STEP: usize = 32;
const CPU_MAX_HEAD_DIM: usize = 256;
/// Fewest query rows `attention_cpu.comp` takes (a group of 8 lanes).
const CPU_MIN_ROWS: usize = 8;
/// `attention_keys_cpu.comp` takes head dims in multiples of this (vec4
/// reads) up to [`CPU_MAX_HEAD_DIM`].
const CPU_KEYS_HEAD_DIM_STEP: usize = 4;

/// The attention kernel of a batch of `t` query rows with head dims
/// `dk`/`dv` under `layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// `attention.comp`: a workgroup of 64 per (head, row), barriers.
    Shared,
    /// `attention_rows.comp`: a workgroup of 256 per (head, [`ATTN_ROWS`]
    /// rows), each tile of keys and values staged once for all of them (a
    /// batch of rows on the GPU layout, head dims up to
    /// [`ROWS_MAX_HEAD_DIM`]).
    SharedRows,
    /// `attention_coop.comp`: a workgroup of subgroups per (head, 16 rows
    /// a subgroup, run of keys), the products in cooperative matrices of
    /// halves (a batch of rows on the GPU layout through an f16 cache,
    /// where the device has them and the keys make two runs or more;
    /// `attention_combine_rows.comp` after it); `d128`: the variant of head
    /// dims up to 128.
    Coop { d128: bool },
    /// `attention_cpu.comp`: an invocation per (row, head).
    CpuRows,
    /// `attention_keys_cpu.comp`: a subgroup per (head, row).
    CpuKeys,
}

/// `rows`: whether the GPU layout takes [`Kernel::SharedRows`] for a batch;
/// `coop`: whether it takes [`Kernel::Coop`] for a batch through an f16
/// cache (`ty`) where the head dims fit.
fn kernel(
    layout: KernelLayout,
    ty: KvType,
    t: usize,
    dk: usize,
    dv: usize,
    rows: bool,
    coop: bool,
) -> Kernel {
    let fits = |step: usize| {
        dk.is_multiple_of(step) && dv.is_multiple_of(step) && dk.max(dv) <= CPU_MAX_HEAD_DIM
    };
    let coop_fits = dk.is_multiple_of(COOP_HEAD_DIM_STEP)
        && dv.is_multiple_of(COOP_HEAD_DIM_STEP)
        && dk.max(dv) <= COOP_MAX_HEAD_DIM;
    if layout != KernelLayout::Cpu {
        if t > 1 && coop && ty == KvType::F16 && coop_fits {
            Kernel::Coop {
                d128: dk.max(dv) > 64,
            }
        } else if t > 1 && rows && dk.max(dv) <= ROWS_MAX_HEAD_DIM {
            Kernel::SharedRows
        } else {
            Kernel::Shared
        }
    } else if t >= CPU_MIN_ROWS && fits(CPU_HEAD_DIM_STEP) {
        Kernel::CpuRows
    } else if fits(CPU_KEYS_HEAD_DIM_STEP) {
        Kernel::CpuKeys
    } else {
        Kernel::Shared
    }
}

/// Whether `b` takes `attention_coop.comp` for `t` rows at `pos0` of
/// `n_head` heads of dims `dk`/`dv` through a cache of `ty`.
pub(super) fn takes_coop(
    b: &VulkanBackend,
    ty: KvType,
    (t, pos0): (usize, usize),
    (n_head, dk, dv): (usize, usize, usize),
) -> bool {
    let k = kernel(
        b.kernel_layout,
        ty,
        t,
        dk,
        dv,
        b.attention_rows,
        b.attention_coop,
    );
    match k {
        Kernel::Coop { d128 } => coop_runs(coop_shader(d128), t, n_head, dv, pos0 + t).is_some(),
        _ => false,
    }
}

fn u32_of(v: usize, what: &str) -> u32 {
    u32::try_from(v).unwrap_or_else(|_| panic!("attention: {what} {v} exceeds u32"))
}

/// Bytes `start..end` of cache elements `e0..e1`, widened to whole words.
fn cache_bytes(kv: &GpuKv, e0: usize, e1: usize) -> std::ops::Range<u64> {
    let eb = kv.elem_bytes();
    (e0 as u64 * eb) / 4 * 4..(e1 as u64 * eb).div_ceil(4) * 4
}

/// The K and V caches as the attention kernels bind them: whole (the
/// positions they read are in the inbox, not known when recording).
fn cache_binds(c: &GpuKv) -> [Bind; 2] {
    [
        Bind {
            buf: c.k,
            bytes: cache_bytes(c, 0, c.n_ctx * c.k_width),
        },
        Bind {
            buf: c.v,
            bytes: cache_bytes(c, 0, c.n_ctx * c.v_width),
        },
    ]
}

/// Writes rows `src` `[T, width]` into cache buffer `buf` (`[n_ctx, width]`)
/// at positions `pos0..pos0 + T` (declared as a write of the whole cache).
fn write_rows(b: &mut VulkanBackend, kv: &GpuKv, buf: u32, width: usize, src: Act, pos0: usize) {
    // One position late, where the cache has room for it.
    let pos0 = if fault::active("kv-offset") && pos0 + src.rows() < kv.n_ctx {
        pos0 + 1
    } else {
        pos0
    };
    let (_, pos_at) = b.stage_u32(&[u32_of(pos0, "position")]);
    let dst = Bind {
        buf,
        bytes: cache_bytes(kv, 0, kv.n_ctx * width),
    };
    if fuse::kv_write(b, src, width, &dst, kv.ty, pos_at) {
        return;
    }
    let n = src.rows() * width;
    let shader = shaders::by_kv::KV_WRITE[kv.ty.index()];
    let invocations = kv.ty.write_invocations(n);
    let push = KvWritePush {
        rows: u32_of(src.rows(), "rows"),
        width: u32_of(width, "cache width"),
        src_offset: u32_of(src.elems().start, "k/v offset"),
        pos_at,
    };
    let groups = b.groups_1d(shader, invocations as u64);
    b.dispatch_op(
        Op::KvWrite { ty: kv.ty, push },
        shader,
        &[Bind::act(src), dst, Bind::step(pos_at)],
        push.as_bytes().to_vec(),
        groups,
    );
}

#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    b: &mut VulkanBackend,
    kv: Kv,
    q: Act,
    k: Act,
    v: Act,
    out: Act,
    pos0: usize,
    p: &AttnParams,
) {
    let c = b.kv(kv);
    let (nh, nkv, dk, dv) = (p.n_head, p.n_kv_head, p.head_dim_k, p.head_dim_v);
    let t = q.rows();
    assert!(
        nkv > 0 && nh % nkv == 0 && c.k_width == nkv * dk && c.v_width == nkv * dv,
        "attention: {nh} heads over {nkv} KV heads of {dk}/{dv} with cache widths {}/{}",
        c.k_width,
        c.v_width
    );
    assert!(
        q.width() == nh * dk
            && k.rows() == t
            && k.width() == c.k_width
            && v.rows() == t
            && v.width() == c.v_width
            && out.rows() == t
            && out.width() == nh * dv,
        "attention: shapes q {q:?} k {k:?} v {v:?} out {out:?}"
    );
    assert!(
        pos0 + t <= c.n_ctx,
        "attention: {t} rows at {pos0} in a {}-position cache",
        c.n_ctx
    );
    assert!(
        dk <= MAX_HEAD_DIM_K && dv <= MAX_HEAD_DIM_V,
        "attention: head dims {dk}/{dv} over the shader's {MAX_HEAD_DIM_K}/{MAX_HEAD_DIM_V}"
    );
    assert!(p.window != Some(0), "attention: window 0 sees nothing");
    if t == 0 {
        return;
    }

    write_rows(b, &c, c.k, c.k_width, k, pos0);
    write_rows(b, &c, c.v, c.v_width, v, pos0);

    let (_, pos_at) = b.stage_u32(&[u32_of(pos0, "pos0")]);
    let push = AttnPush {
        n_head: u32_of(nh, "n_head"),
        group: u32_of(nh / nkv, "group"),
        head_dim_k: u32_of(dk, "head_dim_k"),
        head_dim_v: u32_of(dv, "head_dim_v"),
        k_width: u32_of(c.k_width, "k_width"),
        v_width: u32_of(c.v_width, "v_width"),
        pos_at,
        q_offset: u32_of(q.elems().start, "q offset"),
        out_offset: u32_of(out.elems().start, "out offset"),
        window: p.window.map_or(0, |w| u32_of(w, "window")),
        scale: p.scale,
        softcap: p.softcap.unwrap_or(0.0),
        n_rows: u32_of(t, "rows"),
    };
    let mut kernel = kernel(
        b.kernel_layout,
        c.ty,
        t,
        dk,
        dv,
        b.attention_rows,
        b.attention_coop,
    );
    let first = p.window.map_or(0, |w| (pos0 + 1).saturating_sub(w));
    let n_split = (pos0 + 1 - first).div_ceil(SPLIT_KEYS).min(MAX_SPLITS);
    if let Kernel::Coop { d128 } = kernel {
        if coop_split(b, &c, (q, out), &push, d128, pos0 + t) {
            return;
        }
        // Fewer than two runs of keys, or no room for the partials.
        kernel = self::kernel(b.kernel_layout, c.ty, t, dk, dv, b.attention_rows, false);
    }
    if matches!(kernel, Kernel::Shared | Kernel::SharedRows) {
        // Made by the first (a prefill's, not a replayed step's).
        let Some(part) = partials(b, nh, dv) else {
            return;
        };
        if t == 1 && n_split > 1 {
            split_k(b, &c, (q, out), &push, part, n_split);
            return;
        }
    }
    let by_kv = match kernel {
        Kernel::Shared => shaders::by_kv::ATTENTION,
        Kernel::SharedRows => shaders::by_kv::ATTENTION_ROWS,
        Kernel::Coop { .. } => unreachable!("recorded by coop_split"),
        Kernel::CpuRows => shaders::by_kv::ATTENTION_CPU,
        Kernel::CpuKeys => shaders::by_kv::ATTENTION_KEYS_CPU,
    };
    let shader = by_kv[c.ty.index()];
    #[cfg(feature = "fault-injection")]
    let shader = if fault::active("gpu-softmax-unshifted") {
        unshifted(shader)
    } else {
        shader
    };
    let [kb, vb] = cache_binds(&c);
    let binds = [Bind::act(q), kb, vb, Bind::act(out), Bind::step(pos_at)];
    let groups = match kernel {
        // x: rows (64 per workgroup), y: heads.
        Kernel::CpuRows => [
            u32_of(t.div_ceil(shader.local_size[0] as usize), "rows"),
            push.n_head,
            1,
        ],
        // x: heads, y: rows.
        Kernel::Shared | Kernel::CpuKeys => [push.n_head, u32_of(t, "rows"), 1],
        // x: heads, y: blocks of rows.
        Kernel::SharedRows => [push.n_head, u32_of(t.div_ceil(ATTN_ROWS), "rows"), 1],
        Kernel::Coop { .. } => unreachable!("recorded by coop_split"),
    };
    b.dispatch(shader, &binds, &push, groups);
}

/// The split-K partials buffer of one geometry: its slot, the bytes of
/// its partials and counters, and the first counter word.
struct Partials {
    slot: u32,
    bytes: u64,
    cnt_at: usize,
}

/// The split-K partials and counters for `n_head` heads of `head_dim_v`:
/// made (zeroed) on the first attention of the GPU layout, so that a
/// prefill, not a decode step that is then replayed, carries the fill; the
/// counters zeroed again where another geometry moves them (onto words an
/// earlier dispatch's partials hold). Every dispatch leaves them at zero.
fn partials(b: &mut VulkanBackend, nh: usize, dv: usize) -> Option<Partials> {
    let bytes = attention_partial_bytes(nh, dv);
    let cnt_at = partial_words(nh, dv);
    let slot = match b.attn_partials {
        Some((slot, have, at)) if have >= bytes => {
            if at != cnt_at {
                b.cmds.push(Cmd::Fill {
                    buf: slot,
                    offset: (cnt_at * 4) as u64,
                    size: (nh * 4) as u64,
                    value: 0,
                });
                b.attn_partials = Some((slot, have, cnt_at));
            }
            slot
        }
        _ => match b.new_buffer("attention partials", bytes, false, true) {
            Ok(slot) => {
                b.attn_partials = Some((slot, bytes, cnt_at));
                slot
            }
            Err(e) => {
                let e = b.vk_err("attention partials", bytes, e);
                b.fail(e);
                return None;
            }
        },
    };
    Some(Partials {
        slot,
        bytes,
        cnt_at,
    })
}

/// Decode attention in `n_split` runs of keys (`attention.comp` SPLIT, a
/// workgroup per (head, run), the last run of each head to finish weighing
/// them together): a long context spread over many workgroups instead of
/// one per head, in one dispatch.
fn split_k(
    b: &mut VulkanBackend,
    c: &GpuKv,
    (q, out): (Act, Act),
    push: &AttnPush,
    part: Partials,
    n_split: usize,
) {
    let shader = shaders::by_kv::ATTENTION_SPLIT[c.ty.index()];
    #[cfg(feature = "fault-injection")]
    let shader = if fault::active("gpu-softmax-unshifted") {
        unshifted(shader)
    } else {
        shader
    };
    // The partials and the counters: the whole buffer.
    let part_bind = Bind {
        buf: part.slot,
        bytes: 0..part.bytes,
    };
    let [kb, vb] = cache_binds(c);
    let binds = [
        Bind::act(q),
        kb,
        vb,
        part_bind,
        Bind::step(push.pos_at),
        Bind::act(out),
    ];
    let mut push_bytes = push.as_bytes().to_vec();
    push_bytes.extend_from_slice(&u32_of(n_split, "splits").to_le_bytes());
    push_bytes.extend_from_slice(&u32_of(part.cnt_at, "counters").to_le_bytes());
    b.dispatch_bytes(
        shader,
        &binds,
        push_bytes,
        [push.n_head, 1, u32_of(n_split, "splits")],
    );
}

/// Prefill through cooperative matrices in runs of keys
/// (`attention_coop.comp`, a workgroup per (head, rows, run), each writing
/// its rows' unnormalised partials), then `attention_combine_rows.comp`
/// weighing the runs together, where the batch's `keys` (positions 0 ..
/// pos0 + T) make two runs or more ([`coop_runs`]). Returns whether it
/// recorded them (false: one run, or no room for the partials; the caller
/// takes another kernel).
fn coop_split(
    b: &mut VulkanBackend,
    c: &GpuKv,
    (q, out): (Act, Act),
    push: &AttnPush,
    d128: bool,
    keys: usize,
) -> bool {
    let (t, nh, dv) = (
        push.n_rows as usize,
        push.n_head as usize,
        push.head_dim_v as usize,
    );
    let shader = coop_shader(d128);
    let Some((n_split, split_keys)) = coop_runs(shader, t, nh, dv, keys) else {
        return false;
    };
    let bytes = (n_split * coop_run_bytes(t, nh, dv)) as u64;
    let slot = match b.coop_partials {
        Some((slot, have)) if have >= bytes => slot,
        _ => {
            // Geometric growth: a larger batch or context later allocates
            // again (the old buffer stays with its recorded commands).
            let size = bytes.next_power_of_two();
            match b.new_buffer("attention run partials", size, false, false) {
                Ok(slot) => {
                    b.coop_partials = Some((slot, size));
                    slot
                }
                // No room: one run, no partials.
                Err(_) => return false,
            }
        }
    };
    let part = Bind {
        buf: slot,
        bytes: 0..bytes,
    };
    let ml_at = n_split * t * nh * dv;
    #[cfg(feature = "fault-injection")]
    let shader = if fault::active("gpu-softmax-unshifted") {
        unshifted(shader)
    } else {
        shader
    };
    let [kb, vb] = cache_binds(c);
    let binds = [Bind::act(q), kb, vb, part.clone(), Bind::step(push.pos_at)];
    let mut push_bytes = push.as_bytes().to_vec();
    push_bytes.extend_from_slice(&u32_of(split_keys, "split keys").to_le_bytes());
    push_bytes.extend_from_slice(&u32_of(ml_at, "partials").to_le_bytes());
    b.dispatch_bytes(
        shader,
        &binds,
        push_bytes,
        [
            push.n_head,
            u32_of(t.div_ceil(shader.local_size[0] as usize / 2), "rows"),
            u32_of(n_split, "runs"),
        ],
    );
    let combine = &shaders::ATTENTION_COMBINE_ROWS;
    let cpush = CombinePush {
        n_rows: push.n_rows,
        n_head: push.n_head,
        head_dim_v: push.head_dim_v,
        n_split: u32_of(n_split, "runs"),
        out_offset: push.out_offset,
        ml_at: u32_of(ml_at, "partials"),
    };
    let groups = b.groups_1d(combine, (t * nh * dv) as u64);
    b.dispatch(combine, &[part, Bind::act(out)], &cpush, groups);
    true
}

/// The variant of an attention shader whose online softmax skips the
/// max subtraction (fault `gpu-softmax-unshifted`: the `unshifted` twins of
/// engine/build/variants.rs, compiled only with the feature).
#[cfg(feature = "fault-injection")]
fn unshifted(s: &'static shaders::Shader) -> &'static shaders::Shader {
    shaders::by_name(&format!("{}_unshifted", s.name)).unwrap_or(s)
}

#[cfg(feature = "fault-injection")]
const _: () = {
    let size = std::mem::size_of::<AttnPush>();
    assert!(size == shaders::ATTENTION_F32_UNSHIFTED.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_F16_UNSHIFTED.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_F32_ROWS_UNSHIFTED.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_F16_ROWS_UNSHIFTED.push_constant_size as usize);
    assert!(size + 8 == shaders::ATTENTION_COOP_D64_UNSHIFTED.push_constant_size as usize);
    assert!(size + 8 == shaders::ATTENTION_COOP_D128_UNSHIFTED.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_CPU_F32_UNSHIFTED.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_CPU_F16_UNSHIFTED.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_KEYS_CPU_F32_UNSHIFTED.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_KEYS_CPU_F16_UNSHIFTED.push_constant_size as usize);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_by_layout_rows_and_head_dims() {
        let (gpu, cpu) = (KernelLayout::Gpu, KernelLayout::Cpu);
        let (f32, f16) = (KvType::F32, KvType::F16);
        assert_eq!(kernel(gpu, f32, 1, 64, 64, true, false), Kernel::Shared);
        assert_eq!(kernel(gpu, f32, 2, 64, 64, true, false), Kernel::SharedRows);
        assert_eq!(
            kernel(gpu, f32, 64, 64, 64, true, false),
            Kernel::SharedRows
        );
        assert_eq!(kernel(gpu, f32, 64, 64, 64, false, false), Kernel::Shared);
        assert_eq!(kernel(cpu, f32, 64, 17, 9, true, false), Kernel::Shared);
        // Decode and short batches: the keys kernel; 8 rows and more: the
        // rows kernel where the dims are whole groups of 8 vec4s.
        assert_eq!(kernel(cpu, f32, 1, 64, 64, true, false), Kernel::CpuKeys);
        assert_eq!(kernel(cpu, f32, 7, 256, 256, true, false), Kernel::CpuKeys);
        assert_eq!(kernel(cpu, f32, 8, 64, 64, true, false), Kernel::CpuRows);
        assert_eq!(kernel(cpu, f32, 8, 80, 80, true, false), Kernel::CpuKeys);
        assert_eq!(kernel(cpu, f32, 1, 64, 32, true, false), Kernel::CpuKeys);
        // Past what the CPU kernels hold: the shared-memory kernel.
        assert_eq!(kernel(cpu, f32, 1, 17, 9, true, false), Kernel::Shared);
        assert_eq!(kernel(cpu, f32, 1, 512, 64, true, false), Kernel::Shared);
        assert_eq!(kernel(cpu, f32, 64, 288, 288, true, false), Kernel::Shared);
        // Cooperative matrices: batches through an f16 cache on the GPU
        // layout, head dims of whole 16s up to 128; the rest as before.
        let coop = |d128| Kernel::Coop { d128 };
        assert_eq!(kernel(gpu, f16, 2, 64, 64, true, true), coop(false));
        assert_eq!(kernel(gpu, f16, 512, 64, 64, false, true), coop(false));
        assert_eq!(kernel(gpu, f16, 512, 64, 80, true, true), coop(true));
        assert_eq!(kernel(gpu, f16, 512, 128, 128, true, true), coop(true));
        assert_eq!(kernel(gpu, f16, 1, 64, 64, true, true), Kernel::Shared);
        assert_eq!(
            kernel(gpu, f32, 512, 64, 64, true, true),
            Kernel::SharedRows
        );
        assert_eq!(
            kernel(gpu, f16, 512, 64, 72, true, true),
            Kernel::SharedRows
        );
        assert_eq!(
            kernel(gpu, f16, 512, 256, 256, true, true),
            Kernel::SharedRows
        );
        assert_eq!(
            kernel(gpu, f16, 512, 64, 64, true, false),
            Kernel::SharedRows
        );
        assert_eq!(kernel(cpu, f16, 512, 64, 64, true, true), Kernel::CpuRows);
    }

    #[test]
    fn coop_runs_of_keys() {
        let d64 = coop_shader(false);
        assert_eq!(d64.local_size[0], 128);
        // SmolLM2's 512 rows at depth 2048: 72 workgroups, 10 runs of 256.
        assert_eq!(coop_runs(d64, 512, 9, 64, 2560), Some((10, 256)));
        // At depth 0: runs of at least 256 keys.
        assert_eq!(coop_runs(d64, 512, 9, 64, 512), Some((2, 256)));
        assert_eq!(coop_runs(d64, 300, 9, 64, 300), Some((2, 192)));
        // Fewer than two runs: another kernel.
        assert_eq!(coop_runs(d64, 97, 9, 64, 97), None);
        assert_eq!(coop_runs(d64, 200, 9, 64, 256), None);
        // A short batch at long context: runs of 256 (4 x 9 workgroups).
        assert_eq!(coop_runs(d64, 2, 9, 64, 1000), Some((4, 256)));
        // A batch with workgroups enough by itself: one run, another kernel.
        let d128 = coop_shader(true);
        assert_eq!(coop_runs(d128, 8192, 32, 128, 65536), None);
        // The partials of the runs stay within their cap.
        let (runs, keys) = coop_runs(d128, 1024, 8, 128, 65536).unwrap();
        assert_eq!((runs, keys), (4, 16384));
        assert!(runs * 1024 * 8 * 130 * 4 <= COOP_MAX_PARTIAL_BYTES);
    }
}
