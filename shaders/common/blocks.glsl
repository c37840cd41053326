// ggml block layouts and dequantization, reading a weight as a `uint W[]`
// buffer (the includer declares `W` before including this file).
//
// Blocks are not 4-byte aligned (Q4_0 is 18 bytes), so bytes and halves are
// extracted from words. Portable GLSL 450: no 8/16-bit storage, no float64.
// Formulas follow engine/src/quant (ggml's dequantize_row_*) operation for
// operation, with `precise` where ggml does a multiply then an add, so the
// values are bit-identical to the CPU's dequantization.
//
// One variant define selects the weight type: WEIGHT_<NAME> for each entry
// of WEIGHT_TYPES (engine/src/ggml_type.rs; engine/build/variants.rs
// compiles each weight-reading shader once per entry).
//
// Float types (FLOAT_WEIGHTS) are read one element at a time:
//   float weight_elem(uint row_byte, uint i)   element i of the row at row_byte.
// Block types are read in units of 8 values:
//   void dequant_unit(uint bb, uint u, out vec4 lo, out vec4 hi,
//                     out uint elo, out uint ehi)
// gives unit u (< UNITS) of the block at byte bb: `lo` holds elements
// elo..elo+4 of the block, `hi` elements ehi..ehi+4. Units u of window
// u / UNITS_PER_WINDOW cover exactly the block's elements
// [w * WINDOW_ELEMS, (w + 1) * WINDOW_ELEMS): the matmul tiles step over
// windows.
#ifndef SHARPI_BLOCKS_GLSL
#define SHARPI_BLOCKS_GLSL

// Word i of the weight buffer. An includer may define WORD first to read
// from words it holds (matmul_cpu.comp caches a block's words per row).
#ifndef WORD
#define WORD(i) W[i]
#endif

// Byte b of the buffer.
uint rd_u8(uint b) {
    return (WORD(b >> 2) >> ((b & 3u) * 8u)) & 0xffu;
}

// The little-endian u16 at even byte b.
uint rd_u16(uint b) {
    return (WORD(b >> 2) >> ((b & 2u) * 8u)) & 0xffffu;
}

// The little-endian u32 at any byte b (the second word is only read when b is
// unaligned, so never past the padded end of the buffer).
uint rd_u32(uint b) {
    uint s = (b & 3u) * 8u;
    uint w0 = WORD(b >> 2);
    if (s == 0u) {
        return w0;
    }
    return (w0 >> s) | (WORD((b >> 2) + 1u) << (32u - s));
}

// IEEE half bits to f32, exact for every value (subnormals included, which
// unpackHalf2x16 may flush).
float half_bits(uint h) {
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint m = h & 0x3ffu;
    if (e == 0u) {
        // 0 or subnormal: m * 2^-24, exact in f32.
        float v = float(m) * 5.9604644775390625e-8;
        return sign != 0u ? -v : v;
    }
    if (e == 31u) {
        return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
    }
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

float rd_f16(uint b) {
    return half_bits(rd_u16(b));
}

// The four bytes of a word as a uvec4 (low byte first).
uvec4 bytes4(uint q) {
    return (uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu;
}

// ---------------------------------------------------------------------------
#if defined(WEIGHT_F32)
#define FLOAT_WEIGHTS 1
float weight_elem(uint row_byte, uint i) {
    return uintBitsToFloat(WORD((row_byte >> 2) + i));
}

#elif defined(WEIGHT_F16)
#define FLOAT_WEIGHTS 1
float weight_elem(uint row_byte, uint i) {
    return rd_f16(row_byte + 2u * i);
}

#elif defined(WEIGHT_BF16)
#define FLOAT_WEIGHTS 1
float weight_elem(uint row_byte, uint i) {
    return uintBitsToFloat(rd_u16(row_byte + 2u * i) << 16);
}

// ---------------------------------------------------------------------------
#elif defined(WEIGHT_Q4_0)
// d: f16 @0, qs[16] @2. x = d * (q - 8); element j < 16 low nibble of qs[j],
// j + 16 the high nibble.
#define BLOCK_ELEMS 32u
#define BLOCK_BYTES 18u
#define UNITS 4u
#define WINDOW_ELEMS 32u
#define UNITS_PER_WINDOW 4u
void dequant_unit(uint bb, uint u, out vec4 lo, out vec4 hi, out uint elo, out uint ehi) {
    float d = rd_f16(bb);
    uvec4 b = bytes4(rd_u32(bb + 2u + 4u * u));
    lo = (vec4(b & 0xfu) - 8.0) * d;
    hi = (vec4(b >> 4) - 8.0) * d;
    elo = 4u * u;
    ehi = 16u + 4u * u;
}

#elif defined(WEIGHT_Q4_1)
// d @0, m @2, qs[16] @4. x = d * q + m.
#define BLOCK_ELEMS 32u
#define BLOCK_BYTES 20u
#define UNITS 4u
#define WINDOW_ELEMS 32u
#define UNITS_PER_WINDOW 4u
void dequant_unit(uint bb, uint u, out vec4 lo, out vec4 hi, out uint elo, out uint ehi) {
    float d = rd_f16(bb);
    float m = rd_f16(bb + 2u);
    uvec4 b = bytes4(WORD((bb >> 2) + 1u + u));
    precise vec4 l = vec4(b & 0xfu) * d + m;
    precise vec4 h = vec4(b >> 4) * d + m;
    lo = l;
    hi = h;
    elo = 4u * u;
    ehi = 16u + 4u * u;
}

#elif defined(WEIGHT_Q5_0)
// d @0, qh: u32 @2, qs[16] @6. x = d * (q - 16); bit 4 of element j is bit j
// of qh.
#define BLOCK_ELEMS 32u
#define BLOCK_BYTES 22u
#define UNITS 4u
#define WINDOW_ELEMS 32u
#define UNITS_PER_WINDOW 4u
void dequant_unit(uint bb, uint u, out vec4 lo, out vec4 hi, out uint elo, out uint ehi) {
    float d = rd_f16(bb);
    uint qh = rd_u32(bb + 2u);
    uvec4 b = bytes4(rd_u32(bb + 6u + 4u * u));
    uvec4 j = uvec4(0u, 1u, 2u, 3u) + 4u * u;
    uvec4 h0 = ((uvec4(qh) >> j) & 1u) << 4;
    uvec4 h1 = ((uvec4(qh) >> (j + 16u)) & 1u) << 4;
    lo = (vec4((b & 0xfu) | h0) - 16.0) * d;
    hi = (vec4((b >> 4) | h1) - 16.0) * d;
    elo = 4u * u;
    ehi = 16u + 4u * u;
}

#elif defined(WEIGHT_Q5_1)
// d @0, m @2, qh @4, qs[16] @8. x = d * q + m.
#define BLOCK_ELEMS 32u
#define BLOCK_BYTES 24u
#define UNITS 4u
#define WINDOW_ELEMS 32u
#define UNITS_PER_WINDOW 4u
void dequant_unit(uint bb, uint u, out vec4 lo, out vec4 hi, out uint elo, out uint ehi) {
    float d = rd_f16(bb);
    float m = rd_f16(bb + 2u);
    uint qh = WORD((bb >> 2) + 1u);
    uvec4 b = bytes4(WORD((bb >> 2) + 2u + u));
    uvec4 j = uvec4(0u, 1u, 2u, 3u) + 4u * u;
    uvec4 h0 = ((uvec4(qh) >> j) & 1u) << 4;
    uvec4 h1 = ((uvec4(qh) >> (j + 16u)) & 1u) << 4;
    precise vec4 l = vec4((b & 0xfu) | h0) * d + m;
    precise vec4 h = vec4((b >> 4) | h1) * d + m;
    lo = l;
    hi = h;
    elo = 4u * u;
    ehi = 16u + 4u * u;
}

#elif defined(WEIGHT_Q8_0)
// d @0, qs: i8[32] @2. x = d * q.
#define BLOCK_ELEMS 32u
#define BLOCK_BYTES 34u
#define UNITS 4u
#define WINDOW_ELEMS 32u
#define UNITS_PER_WINDOW 4u
vec4 i8x4(uint q) {
    // Each byte to the top, then an arithmetic shift back: sign-extended.
    return vec4(ivec4(uvec4(q) << uvec4(24u, 16u, 8u, 0u)) >> 24);
}
void dequant_unit(uint bb, uint u, out vec4 lo, out vec4 hi, out uint elo, out uint ehi) {
    float d = rd_f16(bb);
    lo = i8x4(rd_u32(bb + 2u + 8u * u)) * d;
    hi = i8x4(rd_u32(bb + 6u + 8u * u)) * d;
    elo = 8u * u;
    ehi = 8u * u + 4u;
}

// ---------------------------------------------------------------------------
#elif defined(WEIGHT_Q2_K)
// scales[16] @0, qs[64] @16, d @80, dmin @82. Element e = 128h + 32j + 16s + k
// is (qs[32h + 16s + k] >> 2j) & 3 with scale byte 8h + 2j + s:
// x = d * (sc & 15) * q - dmin * (sc >> 4). Unit u: h = u / 16, j = 2 * bit 3,
// s = bit 2, k0 = 4 * (u & 3); lo uses shift 2j, hi shift 2j + 2 (e + 32).
#define BLOCK_ELEMS 256u
#define BLOCK_BYTES 84u
#define UNITS 32u
#define WINDOW_ELEMS 128u
#define UNITS_PER_WINDOW 16u
void dequant_unit(uint bb, uint u, out vec4 lo, out vec4 hi, out uint elo, out uint ehi) {
    uint h = u >> 4;
    uint j = ((u >> 3) & 1u) * 2u;
    uint s = (u >> 2) & 1u;
    uint k0 = 4u * (u & 3u);
    float d = rd_f16(bb + 80u);
    float dmin = rd_f16(bb + 82u);
    uint q = WORD((bb >> 2) + 4u + 8u * h + 4u * s + (u & 3u));
    uint is = 8u * h + 2u * j + s;
    uint sc0 = rd_u8(bb + is);
    uint sc1 = rd_u8(bb + is + 2u);
    float dl0 = d * float(sc0 & 15u);
    float ml0 = dmin * float(sc0 >> 4);
    float dl1 = d * float(sc1 & 15u);
    float ml1 = dmin * float(sc1 >> 4);
    uvec4 b = bytes4(q);
    precise vec4 l = dl0 * vec4((b >> (2u * j)) & 3u) - ml0;
    precise vec4 hh = dl1 * vec4((b >> (2u * j + 2u)) & 3u) - ml1;
    lo = l;
    hi = hh;
    elo = 128u * h + 32u * j + 16u * s + k0;
    ehi = elo + 32u;
}

#elif defined(WEIGHT_Q3_K)
// hmask[32] @0, qs[64] @32, scales[12] @96, d @108. Element e = 128h + 32j +
// 16s + k: low bits (qs[32h + 16s + k] >> 2j) & 3, minus 4 unless bit 4h + j
// of hmask[16s + k] is set; scale index 8h + 2j + s (6-bit, minus 32).
#define BLOCK_ELEMS 256u
#define BLOCK_BYTES 110u
#define UNITS 32u
#define WINDOW_ELEMS 128u
#define UNITS_PER_WINDOW 16u
int scale_q3_k(uint bb, uint is) {
    uint low = is < 8u ? (rd_u8(bb + 96u + is) & 15u) : (rd_u8(bb + 96u + is - 8u) >> 4);
    uint high = (rd_u8(bb + 104u + (is & 3u)) >> (2u * (is >> 2))) & 3u;
    return int(low | (high << 4)) - 32;
}
void dequant_unit(uint bb, uint u, out vec4 lo, out vec4 hi, out uint elo, out uint ehi) {
    uint h = u >> 4;
    uint j = ((u >> 3) & 1u) * 2u;
    uint s = (u >> 2) & 1u;
    uint k0 = 4u * (u & 3u);
    float d = rd_f16(bb + 108u);
    uvec4 b = bytes4(rd_u32(bb + 32u + 32u * h + 16u * s + k0));
    uvec4 m = bytes4(rd_u32(bb + 16u * s + k0));
    uint is = 8u * h + 2u * j + s;
    float dl0 = d * float(scale_q3_k(bb, is));
    float dl1 = d * float(scale_q3_k(bb, is + 2u));
    uint bit = 4u * h + j;
    ivec4 q0 = ivec4((b >> (2u * j)) & 3u) - ivec4((~(m >> bit) & 1u) * 4u);
    ivec4 q1 = ivec4((b >> (2u * j + 2u)) & 3u) - ivec4((~(m >> (bit + 1u)) & 1u) * 4u);
    lo = dl0 * vec4(q0);
    hi = dl1 * vec4(q1);
    elo = 128u * h + 32u * j + 16u * s + k0;
    ehi = elo + 32u;
}

#elif defined(WEIGHT_Q4_K) || defined(WEIGHT_Q5_K)
// Q4_K: d @0, dmin @2, scales[12] @4, qs[128] @16.
// Q5_K: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48.
// Chunk c (64 elements): element 64c + l is the low nibble of qs[32c + l]
// (group 2c), element 64c + 32 + l the high nibble (group 2c + 1); Q5_K adds
// bit 2c / 2c + 1 of qh[l] as bit 4. x = d * sc * q - dmin * m.
#define BLOCK_ELEMS 256u
#define UNITS 32u
#define WINDOW_ELEMS 64u
#define UNITS_PER_WINDOW 8u
#if defined(WEIGHT_Q4_K)
#define BLOCK_BYTES 144u
#define QS_AT 16u
#else
#define BLOCK_BYTES 176u
#define QS_AT 48u
#endif
// ggml's get_scale_min_k4: the 6-bit scale and min of group g, from the
// 12 scale bytes held in three words (read once per unit, not per byte).
uint sbyte(uvec3 s, uint i) {
    return (s[i >> 2] >> ((i & 3u) * 8u)) & 0xffu;
}
uvec2 scale_min_k4(uvec3 s, uint g) {
    if (g < 4u) {
        return uvec2(sbyte(s, g) & 63u, sbyte(s, g + 4u) & 63u);
    }
    return uvec2((sbyte(s, g + 4u) & 15u) | ((sbyte(s, g - 4u) >> 6) << 4),
                 (sbyte(s, g + 4u) >> 4) | ((sbyte(s, g) >> 6) << 4));
}
void dequant_unit(uint bb, uint u, out vec4 lo, out vec4 hi, out uint elo, out uint ehi) {
    uint c = u >> 3;
    uint l0 = 4u * (u & 7u);
    uint w = bb >> 2; // both block sizes are multiples of 4 bytes
    uint dd = WORD(w);
    float d = half_bits(dd & 0xffffu);
    float dmin = half_bits(dd >> 16);
    uvec3 s = uvec3(WORD(w + 1u), WORD(w + 2u), WORD(w + 3u));
    uvec2 sm0 = scale_min_k4(s, 2u * c);
    uvec2 sm1 = scale_min_k4(s, 2u * c + 1u);
    float d1 = d * float(sm0.x);
    float m1 = dmin * float(sm0.y);
    float d2 = d * float(sm1.x);
    float m2 = dmin * float(sm1.y);
    uvec4 b = bytes4(WORD((bb + QS_AT + 32u * c + l0) >> 2));
    uvec4 q0 = b & 15u;
    uvec4 q1 = b >> 4;
#if defined(WEIGHT_Q5_K)
    uvec4 qh = bytes4(WORD((bb + 16u + l0) >> 2));
    q0 |= ((qh >> (2u * c)) & 1u) << 4;
    q1 |= ((qh >> (2u * c + 1u)) & 1u) << 4;
#endif
    precise vec4 l = d1 * vec4(q0) - m1;
    precise vec4 h = d2 * vec4(q1) - m2;
    lo = l;
    hi = h;
    elo = 64u * c + l0;
    ehi = elo + 32u;
}

#elif defined(WEIGHT_Q6_K)
// ql[128] @0, qh[64] @128, scales: i8[16] @192, d @208. Half h, l < 32:
// q1 = ql[64h + l] & 15 | (qh[32h + l] & 3) << 4        element 128h + l
// q2 = ql[64h + l + 32] & 15 | (qh >> 2 & 3) << 4       element 128h + l + 32
// q3 = ql[64h + l] >> 4 | (qh >> 4 & 3) << 4            element 128h + l + 64
// q4 = ql[64h + l + 32] >> 4 | (qh >> 6 & 3) << 4       element 128h + l + 96
// x = d * sc * (q - 32), scale 8h + l / 16 (+2, +4, +6 for q2, q3, q4).
// Unit u: h = u / 16, p = bit 3 (q1/q3 or q2/q4), l0 = 4 * (u & 7).
#define BLOCK_ELEMS 256u
#define BLOCK_BYTES 210u
#define UNITS 32u
#define WINDOW_ELEMS 128u
#define UNITS_PER_WINDOW 16u
void dequant_unit(uint bb, uint u, out vec4 lo, out vec4 hi, out uint elo, out uint ehi) {
    uint h = u >> 4;
    uint p = (u >> 3) & 1u;
    uint l0 = 4u * (u & 7u);
    float d = rd_f16(bb + 208u);
    uvec4 ql = bytes4(rd_u32(bb + 64u * h + 32u * p + l0));
    uvec4 qh = bytes4(rd_u32(bb + 128u + 32u * h + l0));
    uint is = 8u * h + (l0 >> 4) + 2u * p;
    float sc0 = float(bitfieldExtract(int(rd_u8(bb + 192u + is)), 0, 8));
    float sc1 = float(bitfieldExtract(int(rd_u8(bb + 192u + is + 4u)), 0, 8));
    ivec4 q0 = ivec4((ql & 15u) | (((qh >> (2u * p)) & 3u) << 4)) - 32;
    ivec4 q1 = ivec4((ql >> 4) | (((qh >> (2u * p + 4u)) & 3u) << 4)) - 32;
    float ds0 = d * sc0;
    float ds1 = d * sc1;
    lo = ds0 * vec4(q0);
    hi = ds1 * vec4(q1);
    elo = 128u * h + 32u * p + l0;
    ehi = elo + 64u;
}

#else
#error "blocks.glsl: no WEIGHT_* define"
#endif

#endif
