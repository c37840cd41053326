// Dot products of quantized weight blocks with quantized activation blocks
// (common/act.glsl), as the CPU's scalar reference kernels compute them
// (engine/src/cpu/dot/legacy.rs, k.rs: ggml's generic C): an exact integer
// sum per block (per lane of 8 for Q3_K..Q6_K), then the block's f32
// expression with every operation rounded in the CPU's operand order
// (`precise`: no contraction into an FMA). Only the f32 sum over blocks
// (and, for Q3_K..Q6_K, over the eight lane terms) is taken in another
// order than the CPU's.
//
// The includer declares `uint A[]` (the activation blocks), includes
// blocks.glsl (the weight block readers) and defines QT, the activation
// rows one call handles; it may define ACT(ab, t, k), word k of row t's
// block at word ab, to read from words it holds (matmul_cpu.comp):
//   void qdot_block(uint bb, uint ab[QT], inout float acc[QT])
// adds weight block (at byte bb) . activation block (at word ab[t]) to
// acc[t]. ACT_WORDS: words per activation block (one per weight block).
#ifndef SHARPI_QDOT_GLSL
#define SHARPI_QDOT_GLSL

#include "act.glsl"

#ifndef QT
#error "qdot.glsl: define QT (activation rows per call) first"
#endif

#ifndef ACT
#define ACT(ab, t, k) A[(ab) + (k)]
#endif

#ifdef DOT4
// Packed integer dot products (matmul_tiled.comp, matmul_tiled_k.comp,
// which enable GL_EXT_spirv_intrinsics).
// OpSDot of SPV_KHR_integer_dot_product on two words of four signed bytes
// (PackedVectorFormat4x8Bit: fmt 0): the exact sum of the four products.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(uint a, uint b, spirv_literal int fmt);
#endif

// The four signed bytes of a word, low byte first.
ivec4 i8x4i(uint q) {
    return ivec4(uvec4(q) << uvec4(24u, 16u, 8u, 0u)) >> 24;
}

int hsum(ivec4 v) {
    return (v.x + v.y) + (v.z + v.w);
}

// ---------------------------------------------------------------------------
// 32-element blocks against Q8_0 / Q8_1: lo holds elements 4j..4j + 3, hi
// elements 16 + 4j..16 + 4j + 3 (j < 4), as the integers the CPU dots.
#if defined(WEIGHT_Q4_0) || defined(WEIGHT_Q4_1) || defined(WEIGHT_Q5_0) || defined(WEIGHT_Q5_1) || defined(WEIGHT_Q8_0)
#define LEGACY_DOT 1

#if defined(WEIGHT_Q4_1) || defined(WEIGHT_Q5_1)
#define ACT_Q8_1 1
#define ACT_WORDS Q8_1_WORDS
#else
#define ACT_Q8_0 1
#define ACT_WORDS Q8_0_WORDS
#endif

// The words of block bb that hold elements 4j..4j + 3 and 16 + 4j..: x the
// quants (Q4_x, Q5_x: both elements' nibbles, low and high; Q8_0: the low
// elements' bytes), y the rest (Q5_x: the fifth bits of the block; Q8_0:
// the high elements' bytes; Q4_x: 0).
uvec2 wq_words(uint bb, uint j) {
#if defined(WEIGHT_Q4_0)
    return uvec2(rd_u32(bb + 2u + 4u * j), 0u);
#elif defined(WEIGHT_Q4_1)
    return uvec2(WORD((bb >> 2) + 1u + j), 0u);
#elif defined(WEIGHT_Q5_0)
    return uvec2(rd_u32(bb + 6u + 4u * j), rd_u32(bb + 2u));
#elif defined(WEIGHT_Q5_1)
    return uvec2(WORD((bb >> 2) + 2u + j), WORD((bb >> 2) + 1u));
#else // Q8_0
    return uvec2(rd_u32(bb + 2u + 4u * j), rd_u32(bb + 18u + 4u * j));
#endif
}

void wq_pair(uint bb, uint j, out ivec4 lo, out ivec4 hi) {
    uvec2 w = wq_words(bb, j);
#if defined(WEIGHT_Q4_0)
    uvec4 b = bytes4(w.x);
    lo = ivec4(b & 15u) - 8;
    hi = ivec4(b >> 4) - 8;
#elif defined(WEIGHT_Q4_1)
    uvec4 b = bytes4(w.x);
    lo = ivec4(b & 15u);
    hi = ivec4(b >> 4);
#elif defined(WEIGHT_Q5_0) || defined(WEIGHT_Q5_1)
    uint qh = w.y;
    uvec4 b = bytes4(w.x);
    uvec4 e = uvec4(0u, 1u, 2u, 3u) + 4u * j;
    uvec4 h0 = ((uvec4(qh) >> e) & 1u) << 4;
    uvec4 h1 = ((uvec4(qh) >> (e + 16u)) & 1u) << 4;
#if defined(WEIGHT_Q5_0)
    lo = ivec4((b & 15u) | h0) - 16;
    hi = ivec4((b >> 4) | h1) - 16;
#else
    lo = ivec4((b & 15u) | h0);
    hi = ivec4((b >> 4) | h1);
#endif
#else // Q8_0
    lo = i8x4i(w.x);
    hi = i8x4i(w.y);
#endif
}

#ifdef DOT4

// Bits 0..3 of x moved to bits 0, 8, 16, 24 (no carries: the four shifted
// copies never meet).
uint spread4(uint x) {
    return (x * 0x00204081u) & 0x01010101u;
}

// Packed bytes less `off` each, two's complement: every byte is a nibble
// (with the fifth bit: below 128), so no borrow crosses a byte.
uint less_each(uint b, uint off) {
    return ((b | 0x80808080u) - off * 0x01010101u) ^ 0x80808080u;
}

// wq_pair's integers as packed signed bytes (lo: elements 4j..4j + 3, hi:
// 16 + 4j..).
void wq_packed(uint bb, uint j, out uint lo, out uint hi) {
    uvec2 w = wq_words(bb, j);
#if defined(WEIGHT_Q4_0) || defined(WEIGHT_Q4_1)
    uint b = w.x;
    lo = b & 0x0f0f0f0fu;
    hi = (b >> 4) & 0x0f0f0f0fu;
#if defined(WEIGHT_Q4_0)
    lo = less_each(lo, 8u);
    hi = less_each(hi, 8u);
#endif
#elif defined(WEIGHT_Q5_0) || defined(WEIGHT_Q5_1)
    uint qh = w.y;
    uint b = w.x;
    lo = (b & 0x0f0f0f0fu) | (spread4((qh >> (4u * j)) & 15u) << 4);
    hi = ((b >> 4) & 0x0f0f0f0fu) | (spread4((qh >> (16u + 4u * j)) & 15u) << 4);
#if defined(WEIGHT_Q5_0)
    lo = less_each(lo, 16u);
    hi = less_each(hi, 16u);
#endif
#else // Q8_0: signed bytes already
    lo = w.x;
    hi = w.y;
#endif
}
#endif

// The block's f16 scale (and min, Q4_1 / Q5_1; else 0) as f32 bits.
uvec2 block_scales(uint bb) {
    uint dx = floatBitsToUint(rd_f16(bb));
#if defined(WEIGHT_Q4_1) || defined(WEIGHT_Q5_1)
    return uvec2(dx, floatBitsToUint(rd_f16(bb + 2u)));
#else
    return uvec2(dx, 0u);
#endif
}

// A block's term: its integer sum `sumi` with the weight block's scales
// (block_scales) and the activation block's head word (d, and s for Q8_1,
// as f16 halves), in the CPU's operand order.
float legacy_value(int sumi, uvec2 sc, uint head) {
    float dx = uintBitsToFloat(sc.x);
    float dy = half_bits(head & 0xffffu);
#if defined(WEIGHT_Q4_0)
    precise float v = float(sumi) * dx * dy;
#elif defined(WEIGHT_Q4_1) || defined(WEIGHT_Q5_1)
    float mx = uintBitsToFloat(sc.y);
    float sy = half_bits(head >> 16);
    precise float v = (dx * dy) * float(sumi) + mx * sy;
#elif defined(WEIGHT_Q5_0)
    precise float v = (dx * dy) * float(sumi);
#else // Q8_0
    precise float v = float(sumi) * (dx * dy);
#endif
    return v;
}

void qdot_block(uint bb, uint ab[QT], inout float acc[QT]) {
    int sumi[QT];
    for (uint t = 0u; t < QT; t++) {
        sumi[t] = 0;
    }
    for (uint j = 0u; j < 4u; j++) {
        ivec4 lo, hi;
        wq_pair(bb, j, lo, hi);
        for (uint t = 0u; t < QT; t++) {
            sumi[t] += hsum(lo * i8x4i(ACT(ab[t], t, 1u + j)) + hi * i8x4i(ACT(ab[t], t, 5u + j)));
        }
    }
    uvec2 sc = block_scales(bb);
    for (uint t = 0u; t < QT; t++) {
        acc[t] += legacy_value(sumi[t], sc, ACT(ab[t], t, 0u));
    }
}

// ---------------------------------------------------------------------------
// 256-element super-blocks against Q8_K. kq(bb, w): elements 4w..4w + 3
// (w < 64) as the integers the CPU dots; kscale(bb, g): the scale of the 16
// elements 16g.. (Q4_K / Q5_K: of the 32 elements 32 (g / 2)..).
#elif defined(WEIGHT_Q2_K) || defined(WEIGHT_Q3_K) || defined(WEIGHT_Q4_K) || defined(WEIGHT_Q5_K) || defined(WEIGHT_Q6_K)
#define ACT_Q8_K 1
#define ACT_WORDS Q8_K_WORDS

#if defined(WEIGHT_Q2_K)
ivec4 kq(uint bb, uint w) {
    // Byte 32 (e / 128) + e % 32 of qs (@16), 2-bit field (e / 32) % 4.
    uvec4 b = bytes4(WORD((bb + 16u + 32u * (w >> 5) + 4u * (w & 7u)) >> 2));
    return ivec4((b >> (2u * ((w >> 3) & 3u))) & 3u);
}
int kscale(uint bb, uint g) {
    return int(rd_u8(bb + g) & 15u);
}
#elif defined(WEIGHT_Q3_K)
ivec4 kq(uint bb, uint w) {
    uvec4 b = bytes4(rd_u32(bb + 32u + 32u * (w >> 5) + 4u * (w & 7u)));
    uvec4 m = bytes4(rd_u32(bb + 4u * (w & 7u)));
    ivec4 low = ivec4((b >> (2u * ((w >> 3) & 3u))) & 3u);
    // A clear bit e / 32 of hmask[e % 32] means minus 4.
    return low - ivec4(((~(m >> (w >> 3))) & 1u) * 4u);
}
int kscale(uint bb, uint g) {
    return scale_q3_k(bb, g);
}
#elif defined(WEIGHT_Q4_K) || defined(WEIGHT_Q5_K)
ivec4 kq(uint bb, uint w) {
    // Byte 32 (e / 64) + e % 32 of qs, the high nibble when e % 64 >= 32.
    uvec4 b = bytes4(WORD((bb + QS_AT + 32u * (w >> 4) + 4u * (w & 7u)) >> 2));
    uvec4 n = ((w >> 3) & 1u) == 0u ? (b & 15u) : (b >> 4);
#if defined(WEIGHT_Q5_K)
    uvec4 h = bytes4(WORD((bb + 16u + 4u * (w & 7u)) >> 2));
    n |= ((h >> (w >> 3)) & 1u) << 4;
#endif
    return ivec4(n);
}
uvec3 kscales(uint bb) {
    uint w = bb >> 2;
    return uvec3(WORD(w + 1u), WORD(w + 2u), WORD(w + 3u));
}
int kscale(uint bb, uint g) {
    return int(scale_min_k4(kscales(bb), g >> 1).x);
}
#elif defined(WEIGHT_Q6_K)
ivec4 kq(uint bb, uint w) {
    // Half h = e / 128, i = e % 128: ql[64h + i % 64] (high nibble for
    // i >= 64), bits 2 (i / 32) of qh[32h + i % 32] (@128) on top, minus 32.
    uvec4 l = bytes4(rd_u32(bb + 64u * (w >> 5) + 4u * (w & 15u)));
    uvec4 h = bytes4(rd_u32(bb + 128u + 32u * (w >> 5) + 4u * (w & 7u)));
    uvec4 low = ((w >> 4) & 1u) == 0u ? (l & 15u) : (l >> 4);
    uvec4 high = (h >> (2u * ((w >> 3) & 3u))) & 3u;
    return ivec4(low | (high << 4)) - 32;
}
int kscale(uint bb, uint g) {
    return bitfieldExtract(int(rd_u8(bb + 192u + g)), 0, 8);
}
#endif

#if !defined(WEIGHT_Q2_K)
// The super-block's scale d (and, Q4_K / Q5_K, dmin), f16 to f32.
float k_scale(uint bb) {
#if defined(WEIGHT_Q3_K)
    return rd_f16(bb + 108u);
#elif defined(WEIGHT_Q6_K)
    return rd_f16(bb + 208u);
#else
    return half_bits(WORD(bb >> 2) & 0xffffu);
#endif
}
#if defined(WEIGHT_Q4_K) || defined(WEIGHT_Q5_K)
float k_min_scale(uint bb) {
    return half_bits(WORD(bb >> 2) >> 16);
}
// The super-block's term less its mins' (sumi: the activation's bsums
// times the group mins).
float k_min_value(float v, float xdmin, float yd, int sumi) {
    precise float dmin = xdmin * yd;
    precise float vm = v - dmin * float(sumi);
    return vm;
}
#endif

// The super-block's term from its eight lane sums (aux0: lanes 0..3, aux1:
// lanes 4..7), in the CPU's operand order.
float k_lanes_value(ivec4 aux0, ivec4 aux1, float xd, float yd) {
    precise float d = xd * yd;
    vec4 f0 = vec4(aux0);
    vec4 f1 = vec4(aux1);
    precise float v = ((d * f0.x + d * f0.y) + (d * f0.z + d * f0.w))
                    + ((d * f1.x + d * f1.y) + (d * f1.z + d * f1.w));
    return v;
}
#endif

// The exact integer sums of groups g0..g1 (of 16) of a super-block, added
// to aux0 / aux1 (Q2_K: its one sum in aux0.x; else lanes 0..3 and 4..7):
// a block's parts may be summed apart and added together (matvec.comp
// KSPLIT) before qdot_k_finish takes its f32 value.
void qdot_k_part(uint bb, uint ab[QT], uint g0, uint g1, inout ivec4 aux0[QT], inout ivec4 aux1[QT]) {
#if defined(WEIGHT_Q2_K)
    for (uint g = g0; g < g1; g++) {
        int sc = kscale(bb, g);
        for (uint k = 0u; k < 4u; k++) {
            uint w = 4u * g + k;
            ivec4 a = kq(bb, w) * sc;
            for (uint t = 0u; t < QT; t++) {
                aux0[t].x += hsum(a * i8x4i(ACT(ab[t], t, 1u + w)));
            }
        }
    }
#else
    // Lanes as ggml's generic kernels: lane l sums the elements e % 8 == l,
    // each product times its group's scale. Word w's elements are lanes
    // 4 (w & 1)..: aux0 holds lanes 0..3, aux1 lanes 4..7.
    for (uint g = g0; g < g1; g++) {
        int sc = kscale(bb, g);
        for (uint k = 0u; k < 4u; k += 2u) {
            uint w = 4u * g + k;
            ivec4 a0 = kq(bb, w) * sc;
            ivec4 a1 = kq(bb, w + 1u) * sc;
            for (uint t = 0u; t < QT; t++) {
                aux0[t] += a0 * i8x4i(ACT(ab[t], t, 1u + w));
                aux1[t] += a1 * i8x4i(ACT(ab[t], t, 2u + w));
            }
        }
    }
#endif
}

// The super-block's f32 term from its whole integer sums, added to acc.
void qdot_k_finish(uint bb, uint ab[QT], ivec4 aux0[QT], ivec4 aux1[QT], inout float acc[QT]) {
#if defined(WEIGHT_Q2_K)
    float xd = rd_f16(bb + 80u);
    float xdmin = rd_f16(bb + 82u);
    for (uint t = 0u; t < QT; t++) {
        int summs = 0;
        for (uint j = 0u; j < 8u; j++) {
            uint bs = ACT(ab[t], t, 65u + j);
            summs += int(bitfieldExtract(int(bs), 0, 16)) * int(rd_u8(bb + 2u * j) >> 4);
            summs += int(bitfieldExtract(int(bs), 16, 16)) * int(rd_u8(bb + 2u * j + 1u) >> 4);
        }
        float yd = uintBitsToFloat(ACT(ab[t], t, 0u));
        precise float dall = yd * xd;
        precise float dmin = yd * xdmin;
        precise float v = dall * float(aux0[t].x) - dmin * float(summs);
        acc[t] += v;
    }
#else
    float xd = k_scale(bb);
#if defined(WEIGHT_Q4_K) || defined(WEIGHT_Q5_K)
    float xdmin = k_min_scale(bb);
    uvec3 s = kscales(bb);
#endif
    for (uint t = 0u; t < QT; t++) {
        float yd = uintBitsToFloat(ACT(ab[t], t, 0u));
        float v = k_lanes_value(aux0[t], aux1[t], xd, yd);
#if defined(WEIGHT_Q4_K) || defined(WEIGHT_Q5_K)
        int sumi = 0;
        for (uint j = 0u; j < 8u; j++) {
            uint bs = ACT(ab[t], t, 65u + j);
            // bsums 2j and 2j + 1 both belong to group j / 2 ... of 32: j.
            int m = int(scale_min_k4(s, j).y);
            sumi += (bitfieldExtract(int(bs), 0, 16) + bitfieldExtract(int(bs), 16, 16)) * m;
        }
        v = k_min_value(v, xdmin, yd, sumi);
#endif
        acc[t] += v;
    }
#endif
}

void qdot_block(uint bb, uint ab[QT], inout float acc[QT]) {
    ivec4 aux0[QT], aux1[QT];
    for (uint t = 0u; t < QT; t++) {
        aux0[t] = ivec4(0);
        aux1[t] = ivec4(0);
    }
    qdot_k_part(bb, ab, 0u, 16u, aux0, aux1);
    qdot_k_finish(bb, ab, aux0, aux1, acc);
}

#else
#error "qdot.glsl: not a block weight type"
#endif

#endif
