// Quantized activation blocks on the device (the weight type's dot format,
// ggml's vec_dot_type: engine/src/cpu/act.rs) and the exact arithmetic that
// makes them: the bytes are those of the CPU's quantizer, bit for bit.
//
// Layout, in u32 words (one block after another, rows back to back):
//   Q8_0: 9 words: word 0 = f16 bits of d (high half 0), words 1..8 = qs
//         (ggml's 34 bytes with 2 bytes of padding after d);
//   Q8_1: 9 words: word 0 = d | s << 16 (f16 bits), words 1..8 = qs (ggml's
//         36 bytes);
//   Q8_K: 73 words: word 0 = d (f32 bits), words 1..64 = qs, words 65..72 =
//         bsums (16 x i16) (ggml's 292 bytes).
// qs hold 4 signed bytes per word, element 4w + i in byte i of word w.
//
// Vulkan neither guarantees a correctly rounded division nor keeps
// subnormals (lavapipe flushes them), so every rounding step the CPU takes
// in f32 (x86 SSE: correctly rounded, subnormals kept) is done here in
// integers on the bits.
#ifndef SHARPI_ACT_GLSL
#define SHARPI_ACT_GLSL

#include "math.glsl"

#define Q8_0_WORDS 9u
#define Q8_1_WORDS 9u
#define Q8_K_WORDS 73u

// The i32 "integer indefinite" of _mm256_cvtps_epi32 (NaN, out of range).
#define INT_INDEF int(0x80000000u)

// f32 bits -> f16 bits, rounded to nearest even (half's f32_to_f16, which
// F16C matches): NaN keeps its top mantissa bits and is made quiet.
uint f16_bits_of(uint x) {
    uint sign = x & 0x80000000u;
    uint e = x & 0x7f800000u;
    uint man = x & 0x007fffffu;
    if (e == 0x7f800000u) {
        uint nan_bit = man == 0u ? 0u : 0x0200u;
        return (sign >> 16) | 0x7c00u | nan_bit | (man >> 13);
    }
    uint half_sign = sign >> 16;
    int half_exp = int(e >> 23) - 127 + 15;
    if (half_exp >= 0x1f) {
        return half_sign | 0x7c00u;
    }
    if (half_exp <= 0) {
        if (14 - half_exp > 24) {
            return half_sign;
        }
        uint m = man | 0x00800000u;
        uint half_man = m >> uint(14 - half_exp);
        uint round_bit = 1u << uint(13 - half_exp);
        if ((m & round_bit) != 0u && (m & (3u * round_bit - 1u)) != 0u) {
            half_man += 1u;
        }
        return half_sign | half_man;
    }
    uint h = half_sign | (uint(half_exp) << 10) | (man >> 13);
    if ((man & 0x1000u) != 0u && (man & 0x2fffu) != 0u) {
        h += 1u;
    }
    return h;
}

bool is_nan_bits(uint b) {
    return (b & 0x7fffffffu) > 0x7f800000u;
}

bool is_finite_bits(uint b) {
    return (b & 0x7f800000u) != 0x7f800000u;
}

// The significand of finite f32 bits as an integer m and its exponent e:
// |value| = m * 2^e (subnormals included).
void decompose(uint b, out uint m, out int e) {
    uint ex = (b >> 23) & 0xffu;
    m = b & 0x7fffffu;
    if (ex == 0u) {
        e = -149;
    } else {
        m |= 0x800000u;
        e = int(ex) - 150;
    }
}

// Bit k of the 64-bit hi:lo (0 past bit 63).
uint bit64(uint hi, uint lo, uint k) {
    if (k >= 64u) {
        return 0u;
    }
    return k >= 32u ? (hi >> (k - 32u)) & 1u : (lo >> k) & 1u;
}

// Whether any of bits 0..k (exclusive) of hi:lo is set.
bool any_below64(uint hi, uint lo, uint k) {
    if (k == 0u) {
        return false;
    }
    if (k >= 64u) {
        return hi != 0u || lo != 0u;
    }
    if (k > 32u) {
        return lo != 0u || (hi & ((1u << (k - 32u)) - 1u)) != 0u;
    }
    if (k == 32u) {
        return lo != 0u;
    }
    return (lo & ((1u << k) - 1u)) != 0u;
}

// hi:lo / 2^s rounded to nearest even, s >= 1; the caller knows the result
// fits in 32 bits.
uint shr_rne64(uint hi, uint lo, uint s) {
    uint q;
    if (s >= 64u) {
        q = 0u;
    } else if (s >= 32u) {
        q = hi >> (s - 32u);
    } else {
        q = (hi << (32u - s)) | (lo >> s);
    }
    uint half_bit = bit64(hi, lo, s - 1u);
    bool sticky = any_below64(hi, lo, s - 1u);
    if (half_bit != 0u && (sticky || (q & 1u) != 0u)) {
        q += 1u;
    }
    return q;
}

// m * 2^e rounded to the nearest integer (ties to even), m * 2^e < 2^31.
uint rne_scaled(uint hi, uint lo, int e) {
    if (e >= 0) {
        return lo << uint(e);
    }
    return shr_rne64(hi, lo, uint(-e));
}

// One quant (before narrowing to a byte): RNE of |x| * |id| (the exact
// product rounded to f32 first when `twice`: x86's separate multiply), with
// the sign of x * id. xb, idb finite and nonzero, id normal.
//
// When `twice` and both are normal, the device's f32 product is the
// rounded product itself (a Vulkan multiply is correctly rounded; a
// subnormal result, which a device may flush to a zero, is below 0.5 and
// rounds to 0 either way) and roundEven its integer: a few instructions
// instead of the integer path below, which is kept for subnormal operands
// (a device may flush them before multiplying) and for products past 2^22.
int round_product(uint xb, uint idb, bool twice) {
    if (twice && (xb & 0x7f800000u) != 0u && (idb & 0x7f800000u) != 0u) {
        precise float p = uintBitsToFloat(xb) * uintBitsToFloat(idb);
        if (abs(p) < 4194304.0) {
            return int(roundEven(p));
        }
    }
    uint mx, mi;
    int ex, ei;
    decompose(xb, mx, ex);
    decompose(idb, mi, ei);
    uint hi, lo;
    umulExtended(mx, mi, hi, lo);
    int e = ex + ei;
    int top = hi != 0u ? 32 + findMSB(hi) : findMSB(lo);
    uint r;
    if (e + top <= -2) {
        r = 0u; // below 0.5 (after f32 rounding too)
    } else if (twice) {
        // Round to 24 significant bits (an f32; never subnormal here: the
        // value is at least 0.25), then to an integer.
        uint drop = top >= 24 ? uint(top - 23) : 0u;
        uint m1 = drop > 0u ? shr_rne64(hi, lo, drop) : lo;
        r = rne_scaled(0u, m1, e + int(drop));
    } else {
        r = rne_scaled(hi, lo, e);
    }
    bool neg = ((xb ^ idb) & 0x80000000u) != 0u;
    return neg ? -int(r) : int(r);
}

// One step of the Q8_0 / Q8_1 amax over a block's elements in order, as
// _mm256_max_ps folds it (amax = amax > |v| ? amax : |v|, so a NaN is kept
// only when nothing follows it), on the bits: a comparison of non-negative
// f32 is one of their bits, and no subnormal is flushed.
uint q8_amax_step(uint amax, uint xb) {
    uint a = xb & 0x7fffffffu;
    bool gt = !is_nan_bits(amax) && !is_nan_bits(a) && amax > a;
    return gt ? amax : a;
}

// amax / 127 correctly rounded, for a normal finite amax = m 2^(be - 150)
// (m the 24-bit significand): q = m 2^k / 127 with k (6 or 7) putting q in
// [2^23, 2^24), taken in integers (m 2^k < 2^31; a division by a constant),
// rounded up when the remainder passes 127 / 2 (127 is odd: never a tie).
// div_rn where the quotient is subnormal.
uint div_by_127_rn(uint amax) {
    uint m = (amax & 0x7fffffu) | 0x800000u;
    uint k = m >= 16646144u ? 6u : 7u; // 127 2^17: m 2^7 / 127 reaches 2^24
    int be = int(amax >> 23) - int(k);
    if (be < 1) {
        return div_rn(amax, 0x42fe0000u);
    }
    uint num = m << k;
    uint q = num / 127u;
    if (2u * (num - q * 127u) > 127u) {
        q += 1u;
    }
    if (q == 0x1000000u) {
        q >>= 1;
        be += 1;
    }
    return (uint(be) << 23) | (q & 0x7fffffu);
}

// 127 / amax correctly rounded, for a normal finite amax = m 2^(be - 150):
// q = floor(127 2^s / m) with s (40 or 41) putting it in [2^23, 2^24). The
// driver's division estimates it to a few units; the remainder
// 127 2^s - q m, exact in wrapping 32-bit arithmetic (2^s wraps to 0, and
// the remainder is far below 2^31 that close), settles it in one step each
// way, then rounds (a tie would need m's odd part to divide 127: then the
// quotient is exact). div_rn where the result is not a normal.
uint div_127_by_rn(uint amax) {
    uint m = (amax & 0x7fffffu) | 0x800000u;
    uint s = m > 16646144u ? 41u : 40u;
    int be = 300 - int(amax >> 23) - int(s);
    if (be < 1 || be > 254) {
        return div_rn(0x42fe0000u, amax);
    }
    float num = s == 41u ? 279275953455104.0 : 139637976727552.0; // 127 2^s
    uint q = uint(num / float(m));
    int r = int(0u - q * m);
    int delta = int(floor(float(r) / float(m)));
    q = uint(int(q) + delta);
    r -= delta * int(m);
    if (r < 0) {
        q -= 1u;
        r += int(m);
    } else if (r >= int(m)) {
        q += 1u;
        r -= int(m);
    }
    if (2u * uint(r) > m) {
        q += 1u;
    }
    if (q == 0x1000000u) {
        q >>= 1;
        be += 1;
    }
    return (uint(be) << 23) | (q & 0x7fffffu);
}

// A Q8_0 / Q8_1 block's d = amax / 127 and id = 127 / amax (0 when amax is
// 0), as f32 bits.
void q8_scales(uint amax, out uint d, out uint id) {
    if (is_nan_bits(amax)) {
        d = amax | 0x400000u; // x86 keeps the operand's payload, quiet
        id = d;
    } else if (amax == 0x7f800000u) {
        d = amax;
        id = 0u; // 127 / inf
    } else if (amax == 0u) {
        d = 0u;
        id = 0u;
    } else if (amax < 0x00800000u) {
        d = 0u;            // a subnormal / 127: no f16 holds it (f16 0)
        id = 0x7f800000u;  // 127 / subnormal overflows
    } else {
        d = div_by_127_rn(amax);
        id = div_127_by_rn(amax);
    }
}

// One Q8_0 / Q8_1 quant of element bits xb with id (before narrowing to a
// byte; INT_INDEF where x * id is NaN or inf).
int q8_quant(uint xb, uint id) {
    if (!is_finite_bits(xb) || !is_finite_bits(id)) {
        return INT_INDEF;
    }
    if ((xb & 0x7fffffffu) == 0u || id == 0u) {
        return 0;
    }
    return round_product(xb, id, true);
}

// A block's first word: d as f16 and, for Q8_1 (ACT_Q8_1), s = d * sum
// (the quants' wrapping sum) as f16 above it. FAULT_F16_TRUNCATE (fault
// `gpu-act-f16-truncate`): d truncated towards zero instead of rounded.
uint q8_head(uint d, int sum) {
#ifdef FAULT_F16_TRUNCATE
    uint dh = f16_bits_of(d & ~0x1fffu); // the bits f16 drops cleared: truncated
#else
    uint dh = f16_bits_of(d);
#endif
    uint head = dh;
#ifdef ACT_Q8_1
    // s = d * sum in f32: one correctly rounded multiply (a subnormal d,
    // flushed here, gives an f16 0 of the same sign either way).
    uint sb;
    if (is_nan_bits(d)) {
        sb = d;
    } else if (d == 0x7f800000u) {
        sb = sum > 0 ? 0x7f800000u : (sum < 0 ? 0xff800000u : 0xffc00000u);
    } else {
        precise float s = uintBitsToFloat(d) * float(sum);
        sb = floatBitsToUint(s);
        if ((sb & 0x7fffffffu) < 0x00800000u) {
            sb &= 0x80000000u; // a flushed product keeps only its sign
        }
    }
    head |= f16_bits_of(sb) << 16;
#endif
    return head;
}

#endif
