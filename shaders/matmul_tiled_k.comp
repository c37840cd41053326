#version 450
#extension GL_EXT_spirv_intrinsics : require
// Prefill matmul of the 256-element super-block types whose CPU products
// sum in eight lanes (Q3_K, Q4_K, Q5_K, Q6_K: common/qdot.glsl) with packed
// integer dot products (devices with VK_KHR_shader_integer_dot_product),
// tiled through shared memory: the same lane sums (lane l: the elements
// e % 8 == l, each product times its group's scale), the same f32
// expression per super-block (k_lanes_value, k_min_value), summed over the
// super-blocks in order, as matmul.comp: the same bits.
//
// Staging transposes each 32-element chunk of a weight row and of an
// activation row (Q8_K) so that word l of the chunk holds lane l's four
// elements (chunk elements l, l + 8, l + 16, l + 24): one packed dot
// product per lane and chunk where a scale covers 32 elements (Q4_K, Q5_K),
// two (the halves of the word) where it covers 16 (Q3_K, Q6_K).
// Workgroup (x, y) computes TM weight rows by TN tokens (common/tile.glsl:
// the bindings, x as Q8_K blocks), one super-block a stage; invocation
// (tr, tt) dots rows tr + i * LR (i < RM) with tokens tt + j * LT (j < RT).

#include "weights.glsl"

#if !defined(TM) || !defined(TN) || !defined(RM) || !defined(RT)
#error "matmul_tiled_k.comp: define TM, TN, RM and RT"
#endif
#include "tile.glsl"

#include "blocks.glsl"
#define QT 1u
#define DOT4 1
#include "qdot.glsl"

#define ROW_STRIDE ((p.n_in / BLOCK_ELEMS) * ACT_WORDS)
#if defined(WEIGHT_Q4_K) || defined(WEIGHT_Q5_K)
#define GROUP32 1
#endif

// A super-block in shared memory: 19 uvec4 (an odd count: the rows that
// one quarter of a subgroup reads meet in distinct banks). Words 0..63:
// the transposed chunks (chunk c's lane l at 8c + l). Weights: words
// 64..67 the 16 group scales as signed bytes, 68 the scale (f32 bits),
// 69 the min's scale, 70..71 the eight 6-bit mins as bytes (Q4_K, Q5_K).
// Activations: 64 the scale (f32 bits), 65..72 the sums of bsums 2j and
// 2j + 1.
#define SB 19u
shared uvec4 ws[TM * SB];
shared uvec4 xs[TN * SB];

// Byte b of v's words as a lane word: bytes b of v[h], v[h + 2], v[h + 4],
// v[h + 6] (h = 0 or 1: lanes 0..3 or 4..7).
uint lane_word(uint v[8], uint h, uint b) {
    uint s = 8u * b;
    return ((v[h] >> s) & 0xffu) | (((v[h + 2u] >> s) & 0xffu) << 8) |
           (((v[h + 4u] >> s) & 0xffu) << 16) | (((v[h + 6u] >> s) & 0xffu) << 24);
}

// Stores chunk c (words v: elements 4k..4k + 3 in word k) transposed.
void put_chunk(bool weight, uint base, uint c, uint v[8]) {
    uint o[8];
    for (uint l = 0u; l < 8u; l++) {
        o[l] = lane_word(v, l >> 2, l & 3u);
    }
    uint e = base + 2u * c; // uvec4 index of word 8c
    if (weight) {
        ws[e] = uvec4(o[0], o[1], o[2], o[3]);
        ws[e + 1u] = uvec4(o[4], o[5], o[6], o[7]);
    } else {
        xs[e] = uvec4(o[0], o[1], o[2], o[3]);
        xs[e + 1u] = uvec4(o[4], o[5], o[6], o[7]);
    }
}

uint pack_bytes(ivec4 q) {
    uvec4 b = uvec4(q) & 0xffu;
    return b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint tr = tile_tr();
    uint tt = tile_tt();
    uint r0 = tile_r0();
    uint t0 = tile_t0();
    uint nb = p.n_in / BLOCK_ELEMS;

    float acc[RM * RT]; // row i, token j at i * RT + j
    for (uint i = 0u; i < uint(RM * RT); i++) {
        acc[i] = 0.0;
    }

    for (uint blk = 0u; blk < nb; blk++) {
        // Weight chunks: item (row r, chunk c); then each row's scales.
        for (uint it = tid; it < uint(TM) * 8u; it += uint(WG)) {
            uint r = it / 8u;
            uint c = it % 8u;
            // Rows past the chunk read its last row (not written).
            uint row = min(r0 + r, p.rows - 1u);
            uint bb = row * p.row_bytes + blk * BLOCK_BYTES;
            uint v[8];
            for (uint k = 0u; k < 8u; k++) {
                v[k] = pack_bytes(kq(bb, 8u * c + k));
            }
            put_chunk(true, r * SB, c, v);
        }
        for (uint r = tid; r < uint(TM); r += uint(WG)) {
            uint row = min(r0 + r, p.rows - 1u);
            uint bb = row * p.row_bytes + blk * BLOCK_BYTES;
            uint sc[4];
            for (uint q = 0u; q < 4u; q++) {
                sc[q] = pack_bytes(ivec4(kscale(bb, 4u * q), kscale(bb, 4u * q + 1u),
                                         kscale(bb, 4u * q + 2u), kscale(bb, 4u * q + 3u)));
            }
            ws[r * SB + 16u] = uvec4(sc[0], sc[1], sc[2], sc[3]);
            uvec4 tail = uvec4(floatBitsToUint(k_scale(bb)), 0u, 0u, 0u);
#ifdef GROUP32
            uvec3 s = kscales(bb);
            uint m[8];
            for (uint j = 0u; j < 8u; j++) {
                m[j] = scale_min_k4(s, j).y;
            }
            tail.y = floatBitsToUint(k_min_scale(bb));
            tail.z = m[0] | (m[1] << 8) | (m[2] << 16) | (m[3] << 24);
            tail.w = m[4] | (m[5] << 8) | (m[6] << 16) | (m[7] << 24);
#endif
            ws[r * SB + 17u] = tail;
        }
        // Activation chunks: item (token t, chunk c); then each token's
        // scale and bsum pairs.
        for (uint it = tid; it < uint(TN) * 8u; it += uint(WG)) {
            uint t = it / 8u;
            uint c = it % 8u;
            uint tok = min(t0 + t, p.n_tok - 1u);
            uint ab = p.x_offset + tok * ROW_STRIDE + blk * ACT_WORDS;
            uint v[8];
            for (uint k = 0u; k < 8u; k++) {
                v[k] = A[ab + 1u + 8u * c + k];
            }
            put_chunk(false, t * SB, c, v);
        }
        for (uint t = tid; t < uint(TN); t += uint(WG)) {
            uint tok = min(t0 + t, p.n_tok - 1u);
            uint ab = p.x_offset + tok * ROW_STRIDE + blk * ACT_WORDS;
            int ps[8];
            for (uint j = 0u; j < 8u; j++) {
                uint bs = A[ab + 65u + j];
                ps[j] = bitfieldExtract(int(bs), 0, 16) + bitfieldExtract(int(bs), 16, 16);
            }
            xs[t * SB + 16u] = uvec4(A[ab], uint(ps[0]), uint(ps[1]), uint(ps[2]));
            xs[t * SB + 17u] = uvec4(uint(ps[3]), uint(ps[4]), uint(ps[5]), uint(ps[6]));
            xs[t * SB + 18u] = uvec4(uint(ps[7]), 0u, 0u, 0u);
        }
        barrier();

        // Lane sums: lanes 0..3 and 4..7 of row i, token j at i * RT + j.
        ivec4 l0[RM * RT], l1[RM * RT];
        for (uint i = 0u; i < uint(RM * RT); i++) {
            l0[i] = ivec4(0);
            l1[i] = ivec4(0);
        }
        for (uint c = 0u; c < 8u; c++) {
            uvec4 w0[RM], w1[RM];
            int s0[RM], s1[RM]; // the scales of groups 2c and 2c + 1
            for (uint i = 0u; i < uint(RM); i++) {
                uint e = (tr + i * uint(LR)) * SB;
                w0[i] = ws[e + 2u * c];
                w1[i] = ws[e + 2u * c + 1u];
                int sw = int(ws[e + 16u][c >> 1]);
                s0[i] = bitfieldExtract(sw, int(16u * (c & 1u)), 8);
                s1[i] = bitfieldExtract(sw, int(16u * (c & 1u) + 8u), 8);
            }
            for (uint j = 0u; j < uint(RT); j++) {
                uint e = (tt + j * uint(LT)) * SB;
                uvec4 a0 = xs[e + 2u * c];
                uvec4 a1 = xs[e + 2u * c + 1u];
                for (uint i = 0u; i < uint(RM); i++) {
                    uint ij = i * uint(RT) + j;
#ifdef GROUP32
                    // One scale over the chunk's four elements of a lane.
                    l0[ij] += s0[i] * ivec4(sdot4(w0[i].x, a0.x, 0), sdot4(w0[i].y, a0.y, 0),
                                            sdot4(w0[i].z, a0.z, 0), sdot4(w0[i].w, a0.w, 0));
                    l1[ij] += s0[i] * ivec4(sdot4(w1[i].x, a1.x, 0), sdot4(w1[i].y, a1.y, 0),
                                            sdot4(w1[i].z, a1.z, 0), sdot4(w1[i].w, a1.w, 0));
#else
                    // Bytes 0..1 of a lane word in group 2c, 2..3 in 2c + 1.
                    uvec4 lo = uvec4(0x0000ffffu), hi = uvec4(0xffff0000u);
                    uvec4 u0 = w0[i] & lo, v0 = w0[i] & hi, u1 = w1[i] & lo, v1 = w1[i] & hi;
                    l0[ij] += s0[i] * ivec4(sdot4(u0.x, a0.x, 0), sdot4(u0.y, a0.y, 0),
                                            sdot4(u0.z, a0.z, 0), sdot4(u0.w, a0.w, 0))
                            + s1[i] * ivec4(sdot4(v0.x, a0.x, 0), sdot4(v0.y, a0.y, 0),
                                            sdot4(v0.z, a0.z, 0), sdot4(v0.w, a0.w, 0));
                    l1[ij] += s0[i] * ivec4(sdot4(u1.x, a1.x, 0), sdot4(u1.y, a1.y, 0),
                                            sdot4(u1.z, a1.z, 0), sdot4(u1.w, a1.w, 0))
                            + s1[i] * ivec4(sdot4(v1.x, a1.x, 0), sdot4(v1.y, a1.y, 0),
                                            sdot4(v1.z, a1.z, 0), sdot4(v1.w, a1.w, 0));
#endif
                }
            }
        }
        // The super-block's terms.
        for (uint i = 0u; i < uint(RM); i++) {
            uvec4 wt = ws[(tr + i * uint(LR)) * SB + 17u];
            float xd = uintBitsToFloat(wt.x);
            for (uint j = 0u; j < uint(RT); j++) {
                uint e = (tt + j * uint(LT)) * SB;
                uvec4 x0 = xs[e + 16u];
                float yd = uintBitsToFloat(x0.x);
                uint ij = i * uint(RT) + j;
                float v = k_lanes_value(l0[ij], l1[ij], xd, yd);
#ifdef GROUP32
                uvec4 x1 = xs[e + 17u];
                int ps[8] = int[8](int(x0.y), int(x0.z), int(x0.w), int(x1.x), int(x1.y),
                                   int(x1.z), int(x1.w), int(xs[e + 18u].x));
                int sumi = 0;
                for (uint q = 0u; q < 8u; q++) {
                    uint m = ((q < 4u ? wt.z : wt.w) >> (8u * (q & 3u))) & 0xffu;
                    sumi += ps[q] * int(m);
                }
                v = k_min_value(v, uintBitsToFloat(wt.y), yd, sumi);
#endif
                acc[ij] += v;
            }
        }
        barrier();
    }

    tile_store(acc);
}
