// Float functions more accurate than some drivers' built-ins.
#ifndef SHARPI_MATH_GLSL
#define SHARPI_MATH_GLSL

// tanh to a few f32 ulps over the whole range. Built-in tanh is often
// (e^2x - 1) / (e^2x + 1), which loses most of its relative precision near 0
// (cancellation): lavapipe's softcap of small inputs was ~1e-6 relative off.
// |x| < 0.25: the odd Taylor series to x^9 (the next term is under 0.2 ulp);
// otherwise 1 - 2 / (e^2|x| + 1), which is 1 for large |x| (e^2|x| = inf).
float tanh_accurate(float x) {
    float ax = abs(x);
    if (ax < 0.25) {
        float x2 = x * x;
        float p = 62.0 / 2835.0;
        p = p * x2 - 17.0 / 315.0;
        p = p * x2 + 2.0 / 15.0;
        p = p * x2 - 1.0 / 3.0;
        return x + x * x2 * p;
    }
    float t = 1.0 - 2.0 / (exp(2.0 * ax) + 1.0);
    return x < 0.0 ? -t : t;
}

// f32 -> IEEE half bits, round to nearest even (overflow to infinity, NaN
// kept quiet), independent of the driver's packHalf2x16 rounding.
uint f32_to_f16_rne(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        return sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u);
    }
    if (ax >= 0x477ff000u) {
        return sign | 0x7c00u; // at or past 65520: rounds to infinity
    }
    if (ax >= 0x38800000u) { // normal half
        uint r = ax - 0x38000000u;
        return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
    }
    if (ax < 0x33000000u) {
        return sign; // below 2^-25 (2^-25 itself ties to even 0)
    }
    // Subnormal half: round(|f| * 2^24).
    uint e = ax >> 23;
    uint m = (ax & 0x7fffffu) | 0x800000u;
    uint shift = 126u - e; // 14..24
    return sign | ((m + (1u << (shift - 1u)) - 1u + ((m >> shift) & 1u)) >> shift);
}


// IEEE half bits to f32, exact for every value (subnormals included, which
// unpackHalf2x16 may flush).
float f16_to_f32_exact(uint h) {
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint m = h & 0x3ffu;
    if (e == 0u) {
        float v = float(m) * 5.9604644775390625e-8; // m * 2^-24, exact
        return sign != 0u ? -v : v;
    }
    if (e == 31u) {
        return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
    }
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// v rounded to the nearest f16 value (ties to even), as the host's `half`
// crate and ggml's GGML_FP32_TO_FP16 round. packHalf2x16's rounding is the
// driver's choice (an NVIDIA driver does not round to nearest).
float round_f16(float v) {
    return f16_to_f32_exact(f32_to_f16_rne(v));
}

// 2/pi, 32 bits a word from the binary point on (fdlibm's two_over_pi).
const uint TWO_OVER_PI[8] = uint[8](0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u,
                                    0xdb629599u, 0x3c439041u, 0xfe5163abu, 0xdebbc561u);

// Bits s .. s + 31 of the little-endian words w.
uint bits_at(uint w[6], uint s) {
    uint q = s >> 5;
    uint r = s & 31u;
    return r == 0u ? w[q] : (w[q] >> r) | (w[q + 1u] << (32u - r));
}

// ax (finite, >= 1) = j pi/2 + r with |r| <= pi/4: returns r, and j mod 4
// in q. Payne-Hanek: ax = m 2^k (m the 24-bit significand) times 2/pi in
// integer arithmetic, over the four words of 2/pi that reach the bits of
// weight 2^1 and below (earlier words only add multiples of 4): a 152-bit
// product whose 64 bits under the binary point are the fraction, with an
// error under 2^-70. Exact at any |x| up to 3.4e38, where Cody-Waite's
// three-part pi/4 is not (RoPE's angles are positions: 1e6 and more).
float reduce_pio2(float ax, out uint q) {
    uint fb = floatBitsToUint(ax);
    uint m = (fb & 0x7fffffu) | 0x800000u;
    int k = int(fb >> 23) - 150;
    uint w0 = k >= 2 ? uint(k - 2) / 32u : 0u;
    uint w[6] = uint[6](0u, 0u, 0u, 0u, 0u, 0u);
    for (uint i = 0u; i < 4u; i++) {
        uint hi;
        uint lo;
        umulExtended(m, TWO_OVER_PI[w0 + i], hi, lo);
        uint at = 3u - i; // lo weighs 2^(32 at), hi 2^(32 (at + 1))
        uint c;
        w[at] = uaddCarry(w[at], lo, c);
        uint add = hi + c; // hi < 2^24: no overflow
        for (uint j = at + 1u; j < 6u; j++) {
            w[j] = uaddCarry(w[j], add, c);
            add = c;
        }
    }
    // The binary point of m 2^k 2/pi sits at bit 32 (w0 + 4) - k of w.
    uint point = uint(32 * int(w0 + 4u) - k);
    uint flo = bits_at(w, point - 64u);
    uint fhi = bits_at(w, point - 32u);
    uint ip = bits_at(w, point);
    // Round to the nearest multiple: a fraction of 1/2 or more counts as
    // the next multiple and a negative fraction (two's complement).
    bool neg = (fhi >> 31) != 0u;
    q = (ip + (neg ? 1u : 0u)) & 3u;
    if (neg) {
        uint c;
        flo = uaddCarry(~flo, 1u, c);
        fhi = ~fhi + c;
    }
    // |fraction| 2^64 = fhi:flo < 2^63, normalised to 32 bits, then times pi/2.
    float f;
    if (fhi != 0u) {
        int z = 31 - findMSB(fhi);
        uint top = z == 0 ? fhi : (fhi << uint(z)) | (flo >> uint(32 - z));
        f = ldexp(float(top), -32 - z);
    } else if (flo != 0u) {
        int z = 31 - findMSB(flo);
        f = ldexp(float(flo << uint(z)), -64 - z);
    } else {
        f = 0.0;
    }
    precise float r = f * 1.5707963267948966;
    return neg ? -r : r;
}

// (sin x, cos x) to about 2 f32 ulps for every finite x, whatever the
// driver's built-ins do outside [-pi, pi] (Vulkan only bounds their
// absolute error there; an NVIDIA driver was ~1e-5 off at x ~ 4000, RoPE's
// angles at position 4000). Cephes' sinf/cosf: |x| = j pi/2 + z, for
// |x| < 8192 as |x| - j' pi/4 (j' = 2j) with pi/4 in three parts (exact
// products for j' < 2^14), beyond by reduce_pio2; then minimax polynomials
// on [-pi/4, pi/4]. NaN for an infinite or NaN x.
vec2 sincos_accurate(float x) {
    float ax = abs(x);
    if (!(ax <= 3.4028234663852886e38)) {
        return vec2(uintBitsToFloat(0x7fc00000u));
    }
    uint q;
    precise float z;
    if (ax < 8192.0) {
        uint j = uint(ax * 1.27323954473516);
        float y = float(j);
        if ((j & 1u) == 1u) {
            j += 1u;
            y += 1.0;
        }
        q = (j >> 1) & 3u;
        z = ((ax - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
    } else {
        z = reduce_pio2(ax, q);
    }
    precise float zz = z * z;
    precise float sp = ((-1.9515295891e-4 * zz + 8.3321608736e-3) * zz - 1.6666654611e-1) * zz * z + z;
    precise float cp = ((2.443315711809948e-5 * zz - 1.388731625493765e-3) * zz + 4.166664568298827e-2) * zz * zz - 0.5 * zz + 1.0;
    float s;
    float c;
    if (q == 0u) {
        s = sp;
        c = cp;
    } else if (q == 1u) {
        s = cp;
        c = -sp;
    } else if (q == 2u) {
        s = -sp;
        c = -cp;
    } else {
        s = -cp;
        c = sp;
    }
    return vec2(x < 0.0 ? -s : s, c);
}

// a / b correctly rounded (to nearest even) as IEEE f32 bits, for a and b
// finite, nonzero and normal; overflow gives inf, underflow a subnormal or 0.
uint div_rn(uint a, uint b) {
    uint sign = (a ^ b) & 0x80000000u;
    uint ma = (a & 0x7fffffu) | 0x800000u;
    uint mb = (b & 0x7fffffu) | 0x800000u;
    int ex = int((a >> 23) & 0xffu) - int((b >> 23) & 0xffu);
    if (ma < mb) {
        ma <<= 1;
        ex -= 1;
    }
    // 26 quotient bits, q = floor(ma 2^25 / mb) (1.xxx with 25 fraction
    // bits), and whether a remainder is left (the sticky bit). The
    // driver's float division gives q to a few units (ma, mb and 2^25 are
    // exact floats); the exact remainder ma 2^25 - q mb, under 2^31 in
    // magnitude that close, is the same in wrapping 32-bit arithmetic, and
    // settles q.
    float est = float(ma) / float(mb) * 33554432.0;
    uint q = uint(clamp(est, 33554432.0, 67108863.0));
    int rem = int((ma << 25) - q * mb);
    for (uint i = 0u; i < 64u && rem < 0; i++) {
        q -= 1u;
        rem += int(mb);
    }
    for (uint i = 0u; i < 64u && rem >= int(mb); i++) {
        q += 1u;
        rem -= int(mb);
    }
    bool sticky = rem != 0;
    // value = q * 2^(ex - 25); normal significands drop 2 bits.
    int be = ex + 127; // biased exponent of a normal result
    uint drop = be >= 1 ? 2u : uint(2 - be + 1);
    if (drop > 27u) {
        return sign;
    }
    uint r = q >> drop;
    uint half_bit = (q >> (drop - 1u)) & 1u;
    bool st = sticky || (q & ((1u << (drop - 1u)) - 1u)) != 0u;
    if (half_bit != 0u && (st || (r & 1u) != 0u)) {
        r += 1u;
    }
    if (be >= 1) {
        // r in [2^23, 2^24]: a carry to 2^24 moves the exponent up.
        if (r == 0x1000000u) {
            r >>= 1;
            be += 1;
        }
        if (be >= 255) {
            return sign | 0x7f800000u;
        }
        return sign | (uint(be) << 23) | (r & 0x7fffffu);
    }
    // Subnormal (r == 2^23 rounds up to the least normal: the same bits).
    return sign | r;
}

// a / b correctly rounded as an f32 (the CPU's division), whatever the
// driver's division does: exact integer division (div_rn) for normal a
// and b, the driver's for the rest (zeros, infinities, NaN: exact; a
// subnormal operand, which a device may flush). NVIDIA's compiler turned
// (x * 2^-4) / d with d scaled down on its bits back into a product with a
// reciprocal below f32's normals (flushed: 0).
float div_f32_rn(float a, float b) {
    uint ab = floatBitsToUint(a);
    uint bb = floatBitsToUint(b);
    uint ea = ab & 0x7f800000u;
    uint eb = bb & 0x7f800000u;
    if (ea != 0u && ea != 0x7f800000u && eb != 0u && eb != 0x7f800000u) {
        return uintBitsToFloat(div_rn(ab, bb));
    }
    return a / b;
}

// sqrt(a) correctly rounded (to nearest even) as IEEE f32 bits, for a
// finite, positive and normal (the driver's sqrt is only bounded to a few
// ulps: NVIDIA's is not the CPU's bit for bit). a = m 2^e: with M = m 2^sh
// (sh 24 or 23, making e - sh even) in [2^46, 2^48), sqrt(a) = sqrt(M)
// 2^((e - sh) / 2) and s = floor(sqrt(M)) has 24 bits; the driver's sqrt
// gives s to a few units, exact 48-bit integer squares settle it, and the
// remainder M - s^2 rounds it: up when above s ((s + 1/2)^2 = s^2 + s +
// 1/4; never a tie).
uint sqrt_rn(uint a) {
    int e = int(a >> 23) - 150;
    uint m = (a & 0x7fffffu) | 0x800000u;
    uint sh = (e & 1) == 0 ? 24u : 23u;
    int half_e = (e - int(sh)) / 2;
    uint mhi = m >> (32u - sh);
    uint mlo = m << sh;
    uint s = uint(sqrt(float(m) * exp2(float(sh))));
    s = clamp(s, 0x800000u, 0xffffffu);
    uint hi;
    uint lo;
    // Down while s^2 > M, up while (s + 1)^2 <= M (a few steps at most).
    for (uint i = 0u; i < 16u; i++) {
        umulExtended(s, s, hi, lo);
        if (hi > mhi || (hi == mhi && lo > mlo)) {
            s -= 1u;
        } else {
            break;
        }
    }
    for (uint i = 0u; i < 16u; i++) {
        uint t = s + 1u;
        umulExtended(t, t, hi, lo);
        if (hi < mhi || (hi == mhi && lo <= mlo)) {
            s = t;
        } else {
            break;
        }
    }
    umulExtended(s, s, hi, lo);
    uint rem = mlo - lo; // M - s^2 <= 2 s < 2^25: the low words suffice
    if (rem > s) {
        s += 1u; // 2^24 carries into the exponent below
    }
    return (uint(half_e + 150) << 23) + (s - 0x800000u);
}

#endif
