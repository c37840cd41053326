//! Matrix products on quantized weights and the embedding lookup.
//!
//! One shader source per op, one variant per weight type
//! (`engine/build/variants.rs` over [`crate::ggml_type::WEIGHT_TYPES`]; the
//! block formats are in `shaders/common/blocks.glsl`), looked up in the
//! arrays of [`shaders::by_type`]:
//! - `matvec_*` (one activation row, decode): a workgroup per 2 weight rows,
//!   128 invocations over units of 8 weights (activations loaded once for
//!   both rows), shared-memory reduction;
//! - `matmul_*` (several rows, prefill): 32 weight rows x 32 tokens per
//!   workgroup, weights dequantized once per tile into shared memory;
//! - `get_rows_*` (embedding): one invocation per 8 values of a token's row.
//!
//! On CPU implementations ([`KernelLayout::Cpu`], e.g. lavapipe) the two
//! products use `matvec_cpu_*` / `matmul_cpu_*` instead
//! (`shaders/matmul_cpu.comp`): each invocation computes `ROWS` weight rows
//! for `TOKENS` activation rows (the variant's defines, read here with
//! [`define`]), with no shared memory and no barrier; a block's activations
//! reach the lanes of a subgroup by shuffles.
//!
//! Block weight types multiply activations quantized on the device to the
//! type's dot format (`op_quantize.rs`: Q8_0, Q8_1 or Q8_K, the CPU's bytes)
//! in integers, block by block as the CPU's scalar kernels
//! (`shaders/common/qdot.glsl`); float types multiply f32 activations.
//!
//! Every op runs once per chunk of the weight ([`GpuWeight::chunks`]): a
//! chunk's rows are output columns `row0..row0 + rows` (or, for the lookup,
//! the token ids in that range).

use super::fuse;
use super::op_quantize::{act_format, holds, quantized};
use super::{Bind, GpuWeight, KernelLayout, VulkanBackend};
use crate::fault;
use crate::ggml_type::{weight_index, GgmlType};
use crate::ops::{Act, Weight};
use crate::vulkan::push::{u32_of, WeightPush};
use crate::vulkan::shaders::{define, matvec_rows};
use crate::vulkan::{shaders, Shader};

/// The shaders of one weight type.
struct Kernels {
    matvec: &'static Shader,
    matmul: &'static Shader,
    /// The prefill product with packed integer dot products, tiled through
    /// shared memory (32-element block types and Q3_K..Q6_K; `matmul`'s
    /// bits).
    matmul_tiled: Option<&'static Shader>,
    /// The [`KernelLayout::Cpu`] products.
    matvec_cpu: &'static Shader,
    matmul_cpu: &'static Shader,
    get_rows: &'static Shader,
    /// Values one get_rows invocation writes (8 for block types, 1 for
    /// float types).
    values_per_invocation: usize,
}

fn kernels(ty: GgmlType) -> Option<Kernels> {
    use shaders::by_type;
    let t = weight_index(ty)?;
    Some(Kernels {
        matvec: by_type::MATVEC[t],
        matmul: by_type::MATMUL[t],
        matmul_tiled: by_type::MATMUL_TILED[t].or(by_type::MATMUL_TILED_K[t]),
        matvec_cpu: by_type::MATVEC_CPU[t],
        matmul_cpu: by_type::MATMUL_CPU[t],
        get_rows: by_type::GET_ROWS[t],
        values_per_invocation: if ty.block_elems() == 1 { 1 } else { 8 },
    })
}

/// Weight types the device ops read.
pub(super) fn supports(ty: GgmlType) -> bool {
    kernels(ty).is_some()
}

/// Weight rows per `matmul` workgroup and tokens per workgroup (`TM`, `TN`
/// of `shaders/matmul.comp`).
pub(super) const MATMUL_TILE: (usize, usize) = (32, 32);

fn weight_of(b: &VulkanBackend, w: Weight) -> (GpuWeight, Kernels) {
    let gw = b.weight(w).clone();
    let k = kernels(gw.ty).expect("upload accepts only supported types");
    (gw, k)
}

/// `out[t] = row tokens[t]` of `table`, dequantized to f32.
pub(super) fn embed(b: &mut VulkanBackend, table: Weight, tokens: &[u32], out: Act) {
    let (w, k) = weight_of(b, table);
    assert_eq!(tokens.len(), out.rows(), "embed: tokens and rows");
    assert_eq!(
        w.n_in,
        out.width(),
        "embed: {} into width {}",
        w.name,
        out.width()
    );
    if let Some(&t) = tokens.iter().find(|&&t| t as usize >= w.n_out) {
        panic!("embed: token {t} outside {}'s {} rows", w.name, w.n_out);
    }
    if tokens.is_empty() {
        return;
    }
    let shifted: Vec<u32>;
    let tokens = if fault::active("gpu-embed-row") {
        // The neighbouring row (the previous one for the last row).
        shifted = tokens
            .iter()
            .map(|&t| {
                if t as usize + 1 < w.n_out {
                    t + 1
                } else {
                    t - 1
                }
            })
            .collect();
        &shifted[..]
    } else {
        tokens
    };
    let (ids, at) = b.stage_u32(tokens);
    let units = w.n_in / k.values_per_invocation;
    let ids_bind = Bind {
        buf: ids,
        bytes: u64::from(at) * 4..(u64::from(at) + tokens.len() as u64) * 4,
    };
    for c in &w.chunks {
        // Skip chunks no token reads.
        if !tokens
            .iter()
            .any(|&t| (c.row0..c.row0 + c.rows).contains(&(t as usize)))
        {
            continue;
        }
        let push = WeightPush {
            n_in: u32_of(w.n_in, "embed width"),
            row_bytes: u32_of(w.row_bytes, "row bytes"),
            rows: u32_of(c.rows, "rows"),
            col0: u32_of(c.row0, "row"),
            x_offset: at,
            out_offset: u32_of(out.elems().start, "offset"),
            n_out: 0,
            n_tok: u32_of(tokens.len(), "tokens"),
            units: u32_of(units, "units"),
        };
        let groups = b.groups_1d(k.get_rows, (tokens.len() * units) as u64);
        b.dispatch(
            k.get_rows,
            &[Bind::chunk(&w, c), ids_bind.clone(), Bind::act(out)],
            &push,
            groups,
        );
    }
}

/// Records a matmul dispatch over a `[gx, gy]` grid, or keeps an error
/// naming the weight when the grid exceeds the device's workgroup counts.
fn dispatch_2d(
    b: &mut VulkanBackend,
    shader: &'static Shader,
    binds: &[Bind],
    push: &WeightPush,
    [gx, gy]: [usize; 2],
    name: &str,
) {
    let limit = b.context().limits().max_compute_work_group_count;
    if gx > limit[0] as usize || gy > limit[1] as usize {
        let e = b.err(format!(
            "matmul {name}: {gx} x {gy} workgroups exceed the device's {limit:?}"
        ));
        b.fail(e);
        return;
    }
    b.dispatch(shader, binds, push, [gx as u32, gy as u32, 1]);
}

/// `out[t, r] = Σ_c W[r, c] · x[t, c]`: for block types the CPU's per-block
/// products of the weights and `x` in their dot format, for float types f32
/// weights times f32 activations; accumulated in f32.
pub(super) fn matmul(b: &mut VulkanBackend, w: Weight, x: Act, out: Act) {
    let (gw, k) = weight_of(b, w);
    assert!(
        x.width() == gw.n_in && out.width() == gw.n_out && x.rows() == out.rows(),
        "matmul: {} [{}, {}] with x {x:?} into {out:?}",
        gw.name,
        gw.n_in,
        gw.n_out
    );
    assert!(!x.overlaps(out), "matmul: x and out overlap");
    if x.rows() == 0 {
        return;
    }
    let held = act_format(gw.ty).map(|fmt| holds(b, x, fmt));
    if b.kernel_layout == KernelLayout::Gpu && fuse::matvec(b, &gw, x, out, held) {
        return;
    }
    // Block types read x in their dot format (x_offset then counts words).
    let (x_bind, x_offset) = match act_format(gw.ty) {
        Some(fmt) => match quantized(b, x, fmt) {
            Some(q) => (q.bind, q.word0),
            None => return, // the error is kept for the next transfer
        },
        None => (Bind::act(x), u32_of(x.elems().start, "offset")),
    };
    for c in &gw.chunks {
        let push = WeightPush {
            n_in: u32_of(gw.n_in, "n_in"),
            row_bytes: u32_of(gw.row_bytes, "row bytes"),
            rows: u32_of(c.rows, "rows"),
            col0: u32_of(c.row0, "row"),
            x_offset,
            out_offset: u32_of(out.elems().start, "offset"),
            n_out: u32_of(gw.n_out, "n_out"),
            n_tok: u32_of(x.rows(), "rows"),
            units: 0,
        };
        let binds = [Bind::chunk(&gw, c), x_bind.clone(), Bind::act(out)];
        if b.kernel_layout == KernelLayout::Cpu {
            if x.rows() == 1 {
                // One invocation per ROWS weight rows, spilling into y.
                let per = define(k.matvec_cpu, "ROWS");
                let groups = b.groups_1d(k.matvec_cpu, c.rows.div_ceil(per) as u64);
                b.dispatch(k.matvec_cpu, &binds, &push, groups);
            } else {
                // x: weight rows (ROWS per invocation), y: groups of TOKENS
                // activation rows.
                let (per, tokens) = (define(k.matmul_cpu, "ROWS"), define(k.matmul_cpu, "TOKENS"));
                let gx = c.rows.div_ceil(k.matmul_cpu.local_size[0] as usize * per);
                let gy = x.rows().div_ceil(tokens);
                dispatch_2d(b, k.matmul_cpu, &binds, &push, [gx, gy], &gw.name);
            }
        } else if x.rows() == 1 {
            // One workgroup per matvec_rows weight rows, spilling into y.
            let wgs = c.rows.div_ceil(matvec_rows(k.matvec)) as u64;
            let groups = b.groups_1d(k.matvec, wgs * u64::from(k.matvec.local_size[0]));
            b.dispatch(k.matvec, &binds, &push, groups);
        } else {
            let (shader, (tm, tn)) = match k.matmul_tiled {
                Some(tiled) if b.integer_dot => (tiled, (define(tiled, "TM"), define(tiled, "TN"))),
                _ => (k.matmul, MATMUL_TILE),
            };
            let gx = c.rows.div_ceil(tm);
            let gy = x.rows().div_ceil(tn);
            dispatch_2d(b, shader, &binds, &push, [gx, gy], &gw.name);
        }
    }
}
