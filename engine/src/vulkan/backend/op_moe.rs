//! Mixture-of-experts routing on the device: softmax, top-k (libstdc++'s
//! sort order, as the CPU), renormalisation, and the weighting and sum of
//! the experts' outputs. The expert products are in `op_matmul_id.rs`.

use super::{Bind, VulkanBackend};
use crate::ops::Act;
use crate::vulkan::push::{GroupsPush, RowsPush, TopKPush};
use crate::vulkan::{shaders, Shader};

/// Longest row `top_k` sorts (`MAX_N` of `shaders/top_k.comp`; llama.cpp
/// allows at most 512 experts).
pub const TOP_K_MAX: usize = 512;

fn u32_of(v: usize, what: &str) -> u32 {
    u32::try_from(v).unwrap_or_else(|_| panic!("{what} {v} exceeds u32"))
}

/// An element offset as the shaders take it.
fn offset(a: Act) -> u32 {
    u32_of(a.elems().start, "activation offset")
}

/// A row reduction in place, one workgroup per row.
fn per_row(b: &mut VulkanBackend, shader: &'static Shader, x: Act) {
    if x.is_empty() {
        return;
    }
    let push = RowsPush {
        rows: u32_of(x.rows(), "rows"),
        width: u32_of(x.width(), "width"),
        offset: offset(x),
    };
    // One workgroup per row (spilling into y; the shader flattens the id).
    let groups = b.groups_1d(shader, x.rows() as u64 * u64::from(shader.local_size[0]));
    b.dispatch(shader, &[Bind::act(x)], &push, groups);
}

/// Softmax of each row in place, through `shaders/softmax.comp`.
pub(super) fn softmax(b: &mut VulkanBackend, x: Act) {
    per_row(b, &shaders::SOFTMAX, x);
}

/// Each row divided by `max(its sum, 2^-14)`, through
/// `shaders/normalize_rows.comp`.
pub(super) fn normalize_rows(b: &mut VulkanBackend, x: Act) {
    per_row(b, &shaders::NORMALIZE_ROWS, x);
}

/// The `k = ids.width()` largest of each row of `probs`, through
/// `shaders/top_k.comp` (one invocation per row).
pub(super) fn top_k(b: &mut VulkanBackend, probs: Act, ids: Act, weights: Act) {
    let (n, k) = (probs.width(), ids.width());
    assert!(
        ids.rows() == probs.rows() && weights.rows() == probs.rows() && weights.width() == k,
        "top_k: probs {probs:?}, ids {ids:?}, weights {weights:?}"
    );
    assert!(k <= n, "top_k: {k} of {n}");
    assert!(
        n <= TOP_K_MAX,
        "top_k: rows of {n} (the device sorts at most {TOP_K_MAX})"
    );
    assert!(
        !ids.overlaps(probs) && !weights.overlaps(probs) && !ids.overlaps(weights),
        "top_k: overlapping views"
    );
    if probs.rows() == 0 || k == 0 {
        return;
    }
    let push = TopKPush {
        rows: u32_of(probs.rows(), "rows"),
        n: u32_of(n, "n"),
        k: u32_of(k, "k"),
        probs_offset: offset(probs),
        ids_offset: offset(ids),
        weights_offset: offset(weights),
    };
    let groups = b.groups_1d(&shaders::TOP_K, probs.rows() as u64);
    b.dispatch(
        &shaders::TOP_K,
        &[Bind::act(probs), Bind::act(ids), Bind::act(weights)],
        &push,
        groups,
    );
}

/// `x[t, j·n..(j+1)·n] *= s[t, j]`, through `shaders/mul_groups.comp`.
pub(super) fn mul_groups(b: &mut VulkanBackend, x: Act, s: Act) {
    let g = s.width();
    assert!(
        s.rows() == x.rows() && g > 0 && x.width().is_multiple_of(g),
        "mul_groups: x {x:?} in groups of s {s:?}"
    );
    assert!(!x.overlaps(s), "mul_groups: x and s overlap");
    if x.is_empty() {
        return;
    }
    let push = GroupsPush {
        rows: u32_of(x.rows(), "rows"),
        g: u32_of(g, "groups"),
        n: u32_of(x.width() / g, "group size"),
        x_offset: offset(x),
        s_offset: offset(s),
        out_offset: 0,
    };
    let groups = b.groups_1d(&shaders::MUL_GROUPS, x.len() as u64);
    b.dispatch(
        &shaders::MUL_GROUPS,
        &[Bind::act(x), Bind::act(s)],
        &push,
        groups,
    );
}

/// `out[t] = Σ_j x[t, j]` over the groups of `out.width()` elements,
/// through `shaders/sum_groups.comp`.
pub(super) fn sum_groups(b: &mut VulkanBackend, x: Act, out: Act) {
    let n = out.width();
    assert!(
        out.rows() == x.rows() && n > 0 && x.width().is_multiple_of(n) && x.width() >= n,
        "sum_groups: x {x:?} into {out:?}"
    );
    assert!(!x.overlaps(out), "sum_groups: x and out overlap");
    if out.is_empty() {
        return;
    }
    let push = GroupsPush {
        rows: u32_of(x.rows(), "rows"),
        g: u32_of(x.width() / n, "groups"),
        n: u32_of(n, "group size"),
        x_offset: offset(x),
        s_offset: 0,
        out_offset: offset(out),
    };
    let groups = b.groups_1d(&shaders::SUM_GROUPS, out.len() as u64);
    b.dispatch(
        &shaders::SUM_GROUPS,
        &[Bind::act(x), Bind::act(out)],
        &push,
        groups,
    );
}
