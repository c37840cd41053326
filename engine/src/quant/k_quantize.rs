//! Reference quantizers for the super-block formats, computing what ggml's
//! `quantize_row_{q2_K,q3_K,q4_K,q5_K,q6_K,q8_K}_ref` compute, with the
//! helpers those use (`nearest_int`, `make_qx_quants`, `make_q3_quants`,
//! `make_qkx2_quants`) reduced to the arguments the `_ref` paths pass.
//!
//! Every expression keeps the C evaluation order (`w*x*l` is `(w*x)*l`), its
//! int-to-float conversions, its comparisons (so ties and NaNs go the same
//! way) and its integer truncations (an `int` stored into a `uint8_t` keeps
//! the low 8 bits: `as u8` here). All arithmetic is plain f32, no fused
//! multiply-add, so the bytes are the same on every machine.

use half::f16;

use super::k::{
    scale_min_k4, scale_q3_k, BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockQ8_K,
    K_SCALE_SIZE, QK_K,
};

/// ggml's `GROUP_MAX_EPS`: groups whose largest magnitude is below this are
/// treated as all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round to nearest, ties to even, by adding 1.5 * 2^23
/// and reading the low mantissa bits. Exact for |f| <= 2^22 - 1 (ggml asserts
/// that in debug builds); outside that range, and for NaN, it returns the
/// same unspecified value ggml's release build does, never panicking.
#[inline]
pub(crate) fn nearest_int(f: f32) -> i32 {
    let val = f + 12_582_912.0;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The element of largest magnitude (the first of equals) and that magnitude.
#[inline]
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    (max, amax)
}

/// `make_qx_quants(n, nmax, x, L, rmse_type = 1, qw = NULL)`: symmetric
/// quantization to `[-nmax, nmax)` weighted by `x^2`, trying 18 scales around
/// `nmax / max` and keeping the best weighted least-squares one. Writes
/// `L[i] = q + nmax` and returns the scale.
pub(crate) fn make_qx_quants(x: &[f32], nmax: i32, out: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        out.fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (o, &v) in out.iter_mut().zip(x) {
        let l = quant(iscale, v);
        *o = (l + nmax) as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let l = quant(iscale, v);
            let w = v * v;
            sumlx += w * v * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = (quant(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants(n, nmax, x, L, do_rmse = true)`: symmetric quantization to
/// `[-nmax, nmax)` followed by up to five rounds of coordinate descent on the
/// `x^2`-weighted least-squares error. Writes `L[i] = q + nmax` (or all zeros
/// for an all-zero group) and returns the scale.
pub(crate) fn make_q3_quants(x: &[f32], nmax: i32, out: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        out.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (o, &v) in out.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *o = l as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (o, &v) in out.iter_mut().zip(x) {
            let w = v * v;
            let old = *o as f32;
            let mut slx = sumlx - w * v * old;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * old * old;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *o as i32 {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *o = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for o in out.iter_mut() {
        *o += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The arguments of one `make_qkx2_quants` call besides the data.
struct Qkx2 {
    nmax: i32,
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
}

/// `make_qkx2_quants`: asymmetric quantization `x ~ scale * L - min` to
/// `[0, nmax]` with `min >= 0`, searching `nstep + 1` scales and fitting
/// scale and min by weighted least squares for each. Writes `L` and returns
/// `(scale, min)`.
fn make_qkx2_quants(x: &[f32], weights: &[f32], out: &mut [u8], p: &Qkx2) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        out.fill(0);
        return (0.0, -min);
    }
    let nmax = p.nmax as f32;
    let error = |diff: f32| if p.use_mad { diff.abs() } else { diff * diff };

    let mut iscale = nmax / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        out[i] = l.clamp(0, p.nmax) as u8;
        let diff = scale * out[i] as f32 + min - x[i];
        best_error += weights[i] * error(diff);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..n];
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, p.nmax);
            aux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * error(diff);
            }
            if cur_error < best_error {
                out.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Packs 2-bit values: byte `l` of each 32-byte quarter of `qs` holds
/// elements `l`, `l + 32`, `l + 64`, `l + 96` of the matching 128 (Q2_K, Q3_K).
fn pack_2bit(l: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            qs[j / 4 + i] =
                l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6);
        }
    }
    qs
}

/// Q4_K/Q5_K: quantizes the 8 group scales and mins to 6 bits against the
/// largest of each and packs them; returns `(scales, d, dmin)`.
fn pack_scales_mins_k4(scales: &[f32; 8], mins: &[f32; 8]) -> ([u8; K_SCALE_SIZE], f16, f16) {
    let max_scale = scales
        .iter()
        .fold(0.0f32, |m, &s| if s > m { s } else { m });
    let max_min = mins.iter().fold(0.0f32, |m, &s| if s > m { s } else { m });
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; K_SCALE_SIZE];
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    (
        packed,
        f16::from_f32(max_scale / 63.0),
        f16::from_f32(max_min / 63.0),
    )
}

/// Q4_K/Q5_K first pass: per group of 32, weights `sqrt(mean x^2) + |x|` and
/// a `make_qkx2_quants` fit. Returns `(scales, mins)` and fills `l`.
fn fit_groups_k4(x: &[f32; QK_K], l: &mut [u8; QK_K], p: &Qkx2) -> ([f32; 8], [f32; 8]) {
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    for j in 0..8 {
        let xg = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xg {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut weights = [0.0f32; 32];
        for (w, &v) in weights.iter_mut().zip(xg) {
            *w = av_x + v.abs();
        }
        (scales[j], mins[j]) = make_qkx2_quants(xg, &weights, &mut l[32 * j..32 * j + 32], p);
    }
    (scales, mins)
}

/// Q4_K/Q5_K second pass: requantizes each group against its stored 6-bit
/// scale and min, leaving groups whose scale came out zero as they were.
fn requantize_k4(
    x: &[f32; QK_K],
    l: &mut [u8; QK_K],
    scales: &[u8; K_SCALE_SIZE],
    d: f16,
    dmin: f16,
    nmax: i32,
) {
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, scales);
        let d = d.to_f32() * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for ii in 0..32 {
            let q = nearest_int((x[32 * j + ii] + dm) / d);
            l[32 * j + ii] = q.clamp(0, nmax) as u8;
        }
    }
}

impl BlockQ2_K {
    /// `quantize_row_q2_K_ref` for one super-block.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        const Q4SCALE: f32 = 15.0;
        let p = Qkx2 {
            nmax: 3,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: true,
        };
        let mut l = [0u8; QK_K];
        let mut scales = [0.0f32; 16];
        let mut mins = [0.0f32; 16];
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let xg = &x[16 * j..16 * j + 16];
            let weights = std::array::from_fn::<f32, 16, _>(|i| xg[i].abs());
            (scales[j], mins[j]) = make_qkx2_quants(xg, &weights, &mut l[16 * j..16 * j + 16], &p);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }

        let mut packed = [0u8; 16];
        let d = if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                packed[j] = nearest_int(iscale * scales[j]) as u8;
            }
            f16::from_f32(max_scale / Q4SCALE)
        } else {
            f16::from_f32(0.0)
        };
        let dmin = if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                packed[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            f16::from_f32(max_min / Q4SCALE)
        } else {
            f16::from_f32(0.0)
        };

        for j in 0..16 {
            let dl = d.to_f32() * (packed[j] & 0xF) as f32;
            if dl == 0.0 {
                continue;
            }
            let dm = dmin.to_f32() * (packed[j] >> 4) as f32;
            for ii in 0..16 {
                let q = nearest_int((x[16 * j + ii] + dm) / dl);
                l[16 * j + ii] = q.clamp(0, 3) as u8;
            }
        }

        BlockQ2_K {
            scales: packed,
            qs: pack_2bit(&l),
            d,
            dmin,
        }
    }
}

impl BlockQ3_K {
    /// `quantize_row_q3_K_ref` for one super-block.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..16 {
            scales[j] = make_q3_quants(&x[16 * j..16 * j + 16], 4, &mut l[16 * j..16 * j + 16]);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }

        let mut packed = [0u8; 12];
        let d = if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                let q = (nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32;
                let q = q as u8;
                if j < 8 {
                    packed[j] = q & 0xF;
                } else {
                    packed[j - 8] |= (q & 0xF) << 4;
                }
                packed[j % 4 + 8] |= (q >> 4) << (2 * (j / 4));
            }
            f16::from_f32(1.0 / iscale)
        } else {
            f16::from_f32(0.0)
        };

        for j in 0..16 {
            let dl = d.to_f32() * scale_q3_k(j, &packed) as f32;
            if dl == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / dl).clamp(-4, 3);
                l[16 * j + ii] = (q + 4) as i8;
            }
        }

        // The high bit of element e goes to bit e / 32 of hmask[e % 32].
        let mut hmask = [0u8; QK_K / 8];
        let mut low = [0u8; QK_K];
        for (e, (&q, lo)) in l.iter().zip(low.iter_mut()).enumerate() {
            let mut q = q;
            if q > 3 {
                hmask[e % 32] |= 1 << (e / 32);
                q -= 4;
            }
            *lo = q as u8;
        }

        BlockQ3_K {
            hmask,
            qs: pack_2bit(&low),
            scales: packed,
            d,
        }
    }
}

impl BlockQ4_K {
    /// `quantize_row_q4_K_ref` for one super-block.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let p = Qkx2 {
            nmax: 15,
            rmin: -1.0,
            rdelta: 0.1,
            nstep: 20,
            use_mad: false,
        };
        let mut l = [0u8; QK_K];
        let (scales, mins) = fit_groups_k4(x, &mut l, &p);
        let (packed, d, dmin) = pack_scales_mins_k4(&scales, &mins);
        requantize_k4(x, &mut l, &packed, d, dmin, p.nmax);

        let mut qs = [0u8; QK_K / 2];
        for chunk in 0..4 {
            for i in 0..32 {
                qs[32 * chunk + i] = l[64 * chunk + i] | (l[64 * chunk + i + 32] << 4);
            }
        }
        BlockQ4_K {
            d,
            dmin,
            scales: packed,
            qs,
        }
    }
}

impl BlockQ5_K {
    /// `quantize_row_q5_K_ref` for one super-block.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let p = Qkx2 {
            nmax: 31,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: false,
        };
        let mut l = [0u8; QK_K];
        let (scales, mins) = fit_groups_k4(x, &mut l, &p);
        let (packed, d, dmin) = pack_scales_mins_k4(&scales, &mins);
        requantize_k4(x, &mut l, &packed, d, dmin, p.nmax);

        let mut qs = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 8];
        for chunk in 0..4 {
            let (m1, m2) = (1u8 << (2 * chunk), 2u8 << (2 * chunk));
            for i in 0..32 {
                let mut l1 = l[64 * chunk + i];
                if l1 > 15 {
                    l1 -= 16;
                    qh[i] |= m1;
                }
                let mut l2 = l[64 * chunk + i + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[i] |= m2;
                }
                qs[32 * chunk + i] = l1 | (l2 << 4);
            }
        }
        BlockQ5_K {
            d,
            dmin,
            scales: packed,
            qh,
            qs,
        }
    }
}

impl BlockQ6_K {
    /// `quantize_row_q6_K_ref` for one super-block.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for ib in 0..16 {
            scales[ib] =
                make_qx_quants(&x[16 * ib..16 * ib + 16], 32, &mut l[16 * ib..16 * ib + 16]);
            let abs_scale = scales[ib].abs();
            if abs_scale > max_abs_scale {
                max_abs_scale = abs_scale;
                max_scale = scales[ib];
            }
        }

        if max_abs_scale < GROUP_MAX_EPS {
            return BlockQ6_K {
                ql: [0; QK_K / 2],
                qh: [0; QK_K / 4],
                scales: [0; QK_K / 16],
                d: f16::from_f32(0.0),
            };
        }

        let iscale = -128.0 / max_scale;
        let d = f16::from_f32(1.0 / iscale);
        let packed: [i8; 16] =
            std::array::from_fn(|ib| nearest_int(iscale * scales[ib]).min(127) as i8);

        for j in 0..16 {
            let dl = d.to_f32() * packed[j] as f32;
            if dl == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / dl).clamp(-32, 31);
                l[16 * j + ii] = (q + 32) as i8;
            }
        }

        let l = l.map(|v| v as u8);
        let mut ql = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 4];
        for half in 0..2 {
            let (j, ql, qh) = (128 * half, &mut ql[64 * half..], &mut qh[32 * half..]);
            for i in 0..32 {
                let (q1, q2, q3, q4) = (l[j + i], l[j + i + 32], l[j + i + 64], l[j + i + 96]);
                ql[i] = (q1 & 0xF) | ((q3 & 0xF) << 4);
                ql[i + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
                qh[i] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
        BlockQ6_K {
            ql,
            qh,
            scales: packed,
            d,
        }
    }
}

impl BlockQ8_K {
    /// `quantize_row_q8_K_ref` for one super-block. Note the sign convention:
    /// `d = 1 / (-127 / max)` where `max` is the element of largest
    /// magnitude, so `d` is negative when that element is positive, and that
    /// element quantizes to -127.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let (max, amax) = signed_absmax(x);
        if amax == 0.0 {
            // ggml zeroes d and qs and leaves bsums as the buffer had them;
            // here they are zero too, which is what they sum to.
            return BlockQ8_K {
                d: 0.0,
                qs: [0; QK_K],
                bsums: [0; QK_K / 16],
            };
        }
        let iscale = -127.0 / max;
        let qs = x.map(|v| nearest_int(iscale * v).min(127) as i8);
        let bsums = std::array::from_fn(|j| {
            qs[16 * j..16 * j + 16]
                .iter()
                .map(|&q| q as i32)
                .sum::<i32>() as i16
        });
        BlockQ8_K {
            d: 1.0 / iscale,
            qs,
            bsums,
        }
    }
}
