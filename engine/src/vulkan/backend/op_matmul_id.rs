//! Expert products (ggml `mul_mat_id`) on the device: the `MATMUL_ID`
//! variants of the matrix kernels of `op_matmul.rs`, which read the expert
//! of each (token, slot) pair from the ids buffer on the device (no host
//! round trip between the routing and the products).
//!
//! - One row (decode): one dispatch covers all `k` slots, workgroup (GPU
//!   layout) or invocation (CPU layout) z being the slot; each computes its
//!   expert's rows as the plain matvec does.
//! - Several rows (prefill): grouped by expert. Grid z is an expert, y a
//!   window of the pairs routed to it (found by scanning the ids in pair
//!   order), x the expert's output rows, as the plain matmul tiles them: each
//!   expert's weights are read once per window of pairs, not once per pair.
//!   The y count assumes a token picks an expert at most once (what `top_k`
//!   gives: at most `rows` pairs per expert); more are still done, by
//!   stepping the window by the y count.
//!
//! Weights: experts are never split across chunks ([`super::Ops::upload`]
//! chunks stacked matrices whole); each chunk's experts `e0..e0 + n_e` run in
//! one dispatch.

use super::op_matmul::MATMUL_TILE;
use super::op_quantize::{act_format, quantized};
use super::{Bind, KernelLayout, VulkanBackend};
use crate::ggml_type::{weight_index, GgmlType};
use crate::ops::{Act, Weight};
use crate::vulkan::push::{u32_of, IdPush, WeightIdPush, WeightPush};
use crate::vulkan::shaders::{define, matvec_rows};
use crate::vulkan::{shaders, Shader};

/// The `MATMUL_ID` kernels of one weight type: `[matvec, matmul,
/// matvec_cpu, matmul_cpu]`.
fn kernels(ty: GgmlType) -> Option<[&'static Shader; 4]> {
    use shaders::by_type::{MATMUL_CPU_ID, MATMUL_ID, MATVEC_CPU_ID, MATVEC_ID};
    let t = weight_index(ty)?;
    Some([
        MATVEC_ID[t],
        MATMUL_ID[t],
        MATVEC_CPU_ID[t],
        MATMUL_CPU_ID[t],
    ])
}

/// `out[t, j] = W_{ids[t, j]} · x[t (, j)]` for `w` holding `n_expert`
/// stacked `[n_in, n_out]` matrices (see [`crate::ops::Ops::matmul_id`]).
pub(super) fn matmul_id(
    b: &mut VulkanBackend,
    w: Weight,
    n_expert: usize,
    ids: Act,
    x: Act,
    out: Act,
) {
    let gw = b.weight(w).clone();
    assert!(
        n_expert > 0 && gw.n_out.is_multiple_of(n_expert),
        "matmul_id: {} rows of {} as {n_expert} experts",
        gw.n_out,
        gw.name
    );
    let (n, k, n_in) = (ids.rows(), ids.width(), gw.n_in);
    let n_out = gw.n_out / n_expert;
    // Per slot as the CPU decides it: x holds k rows' worth per token.
    let per_slot = k > 1 && x.width() == k * n_in;
    assert!(
        x.rows() == n && (per_slot || x.width() == n_in),
        "matmul_id: x {x:?} for {n} rows of {k} slots of {n_in}"
    );
    assert!(
        out.rows() == n && out.width() == k * n_out,
        "matmul_id: out {out:?} for {n} rows of {k} slots of {n_out}"
    );
    assert!(
        !out.overlaps(x) && !out.overlaps(ids),
        "matmul_id: out overlaps an input"
    );
    if n == 0 || k == 0 {
        return;
    }
    let [matvec, matmul, matvec_cpu, matmul_cpu] =
        kernels(gw.ty).expect("upload accepts only supported types");
    let pairs = n * k;
    let limit = b.context().limits().max_compute_work_group_count;
    // Block types read x in their dot format (x_offset then counts words).
    let (x_bind, x_offset) = match act_format(gw.ty) {
        Some(fmt) => match quantized(b, x, fmt) {
            Some(q) => (q.bind, q.word0),
            None => return, // the error is kept for the next transfer
        },
        None => (Bind::act(x), u32_of(x.elems().start, "offset")),
    };
    for c in &gw.chunks {
        if !c.row0.is_multiple_of(n_out) || !c.rows.is_multiple_of(n_out) {
            let e = b.err(format!(
                "matmul_id {}: an expert ({} bytes) does not fit in one buffer of at most maxStorageBufferRange",
                gw.name,
                n_out * gw.row_bytes
            ));
            b.fail(e);
            return;
        }
        let push = WeightIdPush {
            w: WeightPush {
                n_in: u32_of(n_in, "n_in"),
                row_bytes: u32_of(gw.row_bytes, "row bytes"),
                rows: u32_of(n_out, "expert rows"),
                col0: 0,
                x_offset,
                out_offset: u32_of(out.elems().start, "offset"),
                n_out: u32_of(n_out, "expert rows"),
                n_tok: u32_of(pairs, "pairs"),
                units: 0,
            },
            id: IdPush {
                ids_offset: u32_of(ids.elems().start, "offset"),
                k: u32_of(k, "slots"),
                x_per_slot: u32::from(per_slot),
                e0: u32_of(c.row0 / n_out, "expert"),
                n_e: u32_of(c.rows / n_out, "experts"),
            },
        };
        let binds = [
            Bind::chunk(&gw, c),
            x_bind.clone(),
            Bind::act(out),
            Bind::act(ids),
        ];
        let n_e = c.rows / n_out;
        let (shader, groups) = match (b.kernel_layout, n == 1) {
            // z: the slot; x (spilling into y): ROWS expert rows an invocation.
            (KernelLayout::Cpu, true) => {
                let per = define(matvec_cpu, "ROWS");
                let g = b.groups_1d(matvec_cpu, n_out.div_ceil(per) as u64);
                (matvec_cpu, [g[0] as usize, g[1] as usize, k])
            }
            // z: the expert; y: windows of TOKENS pairs; x: ROWS rows an invocation.
            (KernelLayout::Cpu, false) => {
                let (per, tokens) = (define(matmul_cpu, "ROWS"), define(matmul_cpu, "TOKENS"));
                let gx = n_out.div_ceil(matmul_cpu.local_size[0] as usize * per);
                (matmul_cpu, [gx, n.div_ceil(tokens), n_e])
            }
            // z: the slot; x (spilling into y): matvec_rows rows a workgroup.
            (KernelLayout::Gpu, true) => {
                let wgs = n_out.div_ceil(matvec_rows(matvec)) as u64;
                let g = b.groups_1d(matvec, wgs * u64::from(matvec.local_size[0]));
                (matvec, [g[0] as usize, g[1] as usize, k])
            }
            // z: the expert; y: windows of TN pairs; x: tiles of TM rows.
            (KernelLayout::Gpu, false) => {
                let (tm, tn) = MATMUL_TILE;
                (matmul, [n_out.div_ceil(tm), n.div_ceil(tn), n_e])
            }
        };
        if groups.iter().zip(limit).any(|(&g, l)| g > l as usize) {
            let e = b.err(format!(
                "matmul_id {}: {groups:?} workgroups exceed the device's {limit:?}",
                gw.name
            ));
            b.fail(e);
            return;
        }
        b.dispatch(
            shader,
            &binds,
            &push,
            groups.map(|g| u32::try_from(g).expect("checked against the limits")),
        );
    }
}
