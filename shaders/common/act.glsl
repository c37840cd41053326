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

#endif
