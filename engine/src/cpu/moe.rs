//! Mixture-of-experts ops on the host: routing (softmax, top-k,
//! renormalisation), the expert products grouped by expert, and the
//! weighted sum of the experts' outputs. See the [`crate::ops::Ops`]
//! methods of the same names for the exact math.

use super::argsort::argsort_desc;
use super::error::CpuError;
use super::matmul::{matmul, matvec};
use super::weight::WeightView;
use super::{ggml, CpuNumerics};
use crate::fault;
use crate::threads::Threads;

/// Softmax of each `width`-element row of `x`, in place, as `numerics`
/// says: [`CpuNumerics::Ggml`] as ggml's `soft_max` without mask or scale
/// ([`ggml::soft_max`]: ggml's vector exp and its per-8 sums), otherwise
/// [`softmax`].
pub fn softmax_rows(numerics: CpuNumerics, x: &mut [f32], width: usize) {
    if numerics == CpuNumerics::Reference {
        return softmax(x, width);
    }
    let level = crate::simd::SimdLevel::detected();
    for row in x.chunks_exact_mut(width) {
        // ggml_vec_max_f32: MAX(max, v) = max > v ? max : v from -inf.
        let max = row
            .iter()
            .fold(f32::NEG_INFINITY, |m, &v| if m > v { m } else { v });
        let inv = (1.0 / ggml::soft_max(level, row, max)) as f32;
        row.iter_mut().for_each(|v| *v *= inv);
    }
}

/// Softmax of each `width`-element row of `x`, in place, with
/// [`CpuNumerics::Reference`]'s arithmetic (libm exp, the sum in order).
pub fn softmax(x: &mut [f32], width: usize) {
    for row in x.chunks_exact_mut(width) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f64;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += f64::from(*v);
        }
        let inv = (1.0 / sum) as f32;
        for v in row.iter_mut() {
            *v *= inv;
        }
    }
}

/// For each `n`-element row of `probs`, its `k` largest values (largest
/// first, ties as [`argsort_desc`]): indices into `ids`, values into
/// `weights` (both `k` per row).
pub fn top_k(probs: &[f32], n: usize, ids: &mut [f32], weights: &mut [f32], k: usize) {
    assert!(k <= n, "top_k: {k} of {n}");
    for ((row, id), w) in probs
        .chunks_exact(n)
        .zip(ids.chunks_exact_mut(k))
        .zip(weights.chunks_exact_mut(k))
    {
        let mut order = argsort_desc(row);
        if fault::active("moe-tie-order") {
            reverse_ties(row, &mut order);
        }
        for j in 0..k {
            let e = order[j];
            id[j] = e as f32;
            w[j] = row[e as usize];
        }
    }
}

/// Fault `moe-tie-order`: each run of equal values in `order` (indices
/// into `row`, sorted by falling value) reversed, so that ties come out
/// the other way round.
fn reverse_ties(row: &[f32], order: &mut [u32]) {
    let mut start = 0;
    while start < order.len() {
        let v = row[order[start] as usize];
        let len = order[start..]
            .iter()
            .take_while(|&&i| row[i as usize] == v)
            .count()
            .max(1);
        order[start..start + len].reverse();
        start += len;
    }
}

/// Smallest divisor [`normalize_rows`] uses (f16's smallest normal, as
/// llama.cpp clamps the sum).
pub const MIN_ROW_SUM: f32 = 1.0 / 16384.0; // 2^-14 = 6.103515625e-5

/// Each `width`-element row divided by its sum clamped to
/// `[MIN_ROW_SUM, inf]` as ggml's `clamp` does it (`MAX(MIN(sum, inf),
/// MIN_ROW_SUM)` with C's ternary `MIN`/`MAX`): a NaN sum becomes inf, so
/// the row's finite values become 0 and its NaN stays NaN.
pub fn normalize_rows(x: &mut [f32], width: usize) {
    for row in x.chunks_exact_mut(width) {
        let sum = row.iter().map(|&v| f64::from(v)).sum::<f64>() as f32;
        let d = if sum < f32::INFINITY {
            sum
        } else {
            f32::INFINITY
        };
        let d = if d > MIN_ROW_SUM { d } else { MIN_ROW_SUM };
        for v in row.iter_mut() {
            *v /= d;
        }
    }
}

/// `x[t, j·n..][..n] *= s[t, j]`, `g = s.len() / rows` groups a row.
pub fn mul_groups(x: &mut [f32], s: &[f32], rows: usize) {
    let g = s.len() / rows.max(1);
    let n = x.len() / (rows * g).max(1);
    assert_eq!(
        x.len(),
        rows * g * n,
        "mul_groups: {rows} rows of {g} groups"
    );
    for (xg, &f) in x.chunks_exact_mut(n.max(1)).zip(s) {
        for v in xg {
            *v *= f;
        }
    }
}

/// `out[t] = Σ_j x[t, j]` over the `g` groups of `n = out.len() / rows`
/// elements, added left to right.
pub fn sum_groups(x: &[f32], out: &mut [f32], rows: usize) {
    let n = out.len() / rows.max(1);
    let g = x.len() / (rows * n).max(1);
    assert_eq!(x.len(), rows * g * n, "sum_groups: {rows} rows of {n}");
    for (xr, o) in x.chunks_exact(g * n).zip(out.chunks_exact_mut(n)) {
        o.copy_from_slice(&xr[..n]);
        for xg in xr[n..].chunks_exact(n) {
            for (a, b) in o.iter_mut().zip(xg) {
                *a += *b;
            }
        }
    }
}

/// The expert products of [`crate::ops::Ops::matmul_id`]: `w` holds
/// `n_expert` stacked `[cols, rows / n_expert]` matrices; `ids` is `[n, k]`;
/// `x` is `[n, cols]` or `[n, k·cols]`; `out` is `[n, k·n_out]`. The rows
/// routed to each expert are gathered and multiplied in one [`matmul`]
/// (one [`matvec`] when a single row chose it), so every output element is
/// the same kernel dot a plain product gives.
pub fn matmul_id(
    threads: &Threads,
    w: WeightView<'_>,
    n_expert: usize,
    ids: &[f32],
    k: usize,
    x: &[f32],
    out: &mut [f32],
) -> Result<(), CpuError> {
    let (cols, n_out) = (w.cols(), w.rows() / n_expert.max(1));
    let n = ids.len() / k.max(1);
    assert!(
        n_expert > 0 && w.rows() == n_expert * n_out && ids.len() == n * k,
        "matmul_id: {} rows as {n_expert} experts, {} ids in rows of {k}",
        w.rows(),
        ids.len()
    );
    let per_slot = x.len() == n * k * cols && k > 1;
    assert!(
        per_slot || x.len() == n * cols,
        "matmul_id: input of {} for {n} rows of {cols} ({k} slots)",
        x.len()
    );
    assert_eq!(out.len(), n * k * n_out, "matmul_id: output size");

    // slots[e]: the (row, slot) pairs routed to expert e, in row order.
    let mut slots: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n_expert];
    for (i, &id) in ids.iter().enumerate() {
        let e = id as usize;
        assert!(
            id >= 0.0 && id.fract() == 0.0 && e < n_expert,
            "matmul_id: expert id {id} of {n_expert}"
        );
        slots[e].push((i / k, i % k));
    }
    let rb = w.row_bytes();
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for (e, pairs) in slots.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
        let we = WeightView::new(
            w.ty(),
            n_out,
            cols,
            &w.data()[e * n_out * rb..(e + 1) * n_out * rb],
        )?;
        // xs: [m, cols] gathered inputs; ys: [m, n_out] their products.
        xs.clear();
        for &(t, j) in pairs {
            let r = if per_slot { t * k + j } else { t };
            xs.extend_from_slice(&x[r * cols..(r + 1) * cols]);
        }
        ys.clear();
        ys.resize(pairs.len() * n_out, 0.0);
        if pairs.len() == 1 {
            matvec(threads, we, &xs, &mut ys)?;
        } else {
            matmul(threads, we, &xs, &mut ys)?;
        }
        for (&(t, j), y) in pairs.iter().zip(ys.chunks_exact(n_out)) {
            let o = (t * k + j) * n_out;
            out[o..o + n_out].copy_from_slice(y);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml_type::GgmlType;
    use crate::quant::quantize_row;

    #[test]
    fn softmax_rows_sum_to_one() {
        let mut x = vec![1.0, 2.0, 3.0, -1.0, 0.0, 1000.0];
        softmax(&mut x, 3);
        assert!((x[..3].iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[2] > x[1] && x[1] > x[0]);
        assert_eq!(&x[3..], &[0.0, 0.0, 1.0]);
    }

    #[test]
    fn top_k_and_normalize() {
        let probs = [0.1, 0.4, 0.2, 0.3, 0.25, 0.25, 0.25, 0.25];
        let (mut ids, mut w) = ([0.0; 4], [0.0; 4]);
        top_k(&probs, 4, &mut ids, &mut w, 2);
        assert_eq!(ids, [1.0, 3.0, 0.0, 1.0]);
        assert_eq!(w, [0.4, 0.3, 0.25, 0.25]);
        normalize_rows(&mut w, 2);
        // The sum is taken in f64 and rounded once: not 0.4f32 + 0.3f32.
        let sum = (f64::from(0.4f32) + f64::from(0.3f32)) as f32;
        assert_eq!(w, [0.4 / sum, 0.3 / sum, 0.5, 0.5]);
        let mut tiny = [0.0, 0.0];
        normalize_rows(&mut tiny, 2);
        assert_eq!(tiny, [0.0, 0.0]);
    }

    #[test]
    fn normalize_clamps_as_ggml() {
        // Under 2^-14: divided by 2^-14.
        let mut x = [1e-6f32, 3e-6];
        normalize_rows(&mut x, 2);
        assert_eq!(x, [1e-6 / MIN_ROW_SUM, 3e-6 / MIN_ROW_SUM]);
        // ggml's clamp turns a NaN sum into inf (C's MIN(NaN, inf) is inf):
        // finite values become 0, the NaN stays.
        let mut x = [0.5f32, f32::NAN, 0.25];
        normalize_rows(&mut x, 3);
        assert_eq!(&x[..1], &[0.0]);
        assert!(x[1].is_nan());
        assert_eq!(x[2], 0.0);
        // A sum past f32's range (f64 holds it) is inf as well.
        let mut x = [3e38f32, 3e38, f32::INFINITY];
        normalize_rows(&mut x, 3);
        assert_eq!(&x[..2], &[0.0, 0.0]);
        assert!(x[2].is_nan());
    }

    #[test]
    fn reversed_ties_flip_only_equal_runs() {
        let row = [0.25, 0.5, 0.25, 0.1, 0.5, 0.25];
        let mut order = argsort_desc(&row);
        assert_eq!(order, [1, 4, 0, 2, 5, 3]);
        reverse_ties(&row, &mut order);
        assert_eq!(order, [4, 1, 5, 2, 0, 3]);
    }

    #[test]
    fn groups() {
        let mut x = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        mul_groups(&mut x, &[2.0, 0.5, -1.0, 1.0], 2);
        assert_eq!(x, [2.0, 4.0, 1.5, 2.0, -5.0, -6.0, 7.0, 8.0]);
        let mut out = [0.0; 4];
        sum_groups(&x, &mut out, 2);
        assert_eq!(out, [3.5, 6.0, 2.0, 2.0]);
    }

    /// Grouped by expert or row by row, each output is the plain product.
    #[test]
    fn matmul_id_matches_plain_products() {
        let threads = Threads::new(2).unwrap();
        let (n_expert, n_out, cols, k, n) = (4, 8, 64, 2, 5);
        let vals: Vec<f32> = (0..n_expert * n_out * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let rb = 34 * cols / 32;
        let mut bytes = vec![0u8; n_expert * n_out * rb];
        quantize_row(GgmlType::Q8_0, &vals, &mut bytes).unwrap();
        let w = WeightView::new(GgmlType::Q8_0, n_expert * n_out, cols, &bytes).unwrap();
        let ids: Vec<f32> = [0, 2, 2, 1, 3, 2, 2, 0, 1, 3]
            .iter()
            .map(|&e| e as f32)
            .collect();
        for per_slot in [false, true] {
            let rows_in = if per_slot { n * k } else { n };
            let x: Vec<f32> = (0..rows_in * cols)
                .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
                .collect();
            let mut out = vec![0.0; n * k * n_out];
            matmul_id(&threads, w, n_expert, &ids, k, &x, &mut out).unwrap();
            for t in 0..n {
                for j in 0..k {
                    let e = ids[t * k + j] as usize;
                    let we = WeightView::new(
                        GgmlType::Q8_0,
                        n_out,
                        cols,
                        &bytes[e * n_out * rb..(e + 1) * n_out * rb],
                    )
                    .unwrap();
                    let r = if per_slot { t * k + j } else { t };
                    let mut y = vec![0.0; n_out];
                    matvec(&threads, we, &x[r * cols..(r + 1) * cols], &mut y).unwrap();
                    let o = (t * k + j) * n_out;
                    assert_eq!(&out[o..o + n_out], &y[..], "row {t} slot {j}");
                }
            }
        }
    }
}
