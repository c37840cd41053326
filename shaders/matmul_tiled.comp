#version 450
#extension GL_EXT_spirv_intrinsics : require
// Prefill matmul of the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0) with packed integer dot products (devices with
// VK_KHR_shader_integer_dot_product), tiled through shared memory:
// out[t, col0 + r] = sum over blocks of W[r, blk] . x[t, blk]: the integer
// block sums of matmul.comp (common/qdot.glsl), the same f32 expression per
// block (legacy_value), summed over the blocks in order: the same bits.
//
// Workgroup (x, y) computes TM weight rows by TN tokens (common/tile.glsl:
// the bindings, x as Q8_0 / Q8_1 blocks from quantize_act.comp). Per stage
// it loads KB blocks of each of its rows (as signed bytes, the type's
// offset taken off, and the block's scales) and the matching activation
// blocks into shared memory, neighbouring invocations reading neighbouring
// blocks; then invocation (tr, tt) dots rows tr + i * LR (i < RM) with
// tokens tt + j * LT (j < RT) from shared memory.

#include "weights.glsl"

// Tile TM rows x TN tokens, RM rows x RT tokens per invocation, KB blocks
// per stage (the variant's defines: engine/build/variants.rs).
#if !defined(TM) || !defined(TN) || !defined(RM) || !defined(RT) || !defined(KB)
#error "matmul_tiled.comp: define TM, TN, RM, RT and KB"
#endif
#include "tile.glsl"

#include "blocks.glsl"
#define QT 1u
#define DOT4 1
#include "qdot.glsl"

#define ROW_STRIDE ((p.n_in / BLOCK_ELEMS) * ACT_WORDS)

// A block in shared memory: three uvec4 (an odd count: the rows that one
// quarter of a subgroup reads meet in distinct banks): elements 0..15 and
// 16..31 as signed bytes, then (weights) the scale and min bits or
// (activations) the block's head word.
shared uvec4 ws[KB * TM * 3];
shared uvec4 xs[KB * TN * 3];

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

    for (uint blk0 = 0u; blk0 < nb; blk0 += uint(KB)) {
        uint kbn = min(uint(KB), nb - blk0);
        // Weight blocks: item (row r, block k).
        for (uint it = tid; it < uint(TM * KB); it += uint(WG)) {
            uint r = it / uint(KB);
            uint k = it % uint(KB);
            if (k < kbn) {
                // Rows past the chunk read its last row (not written).
                uint row = min(r0 + r, p.rows - 1u);
                uint bb = row * p.row_bytes + (blk0 + k) * BLOCK_BYTES;
                uvec4 lo, hi;
                for (uint j = 0u; j < 4u; j++) {
                    wq_packed(bb, j, lo[j], hi[j]);
                }
                uint e = (k * uint(TM) + r) * 3u;
                ws[e] = lo;
                ws[e + 1u] = hi;
                ws[e + 2u] = uvec4(block_scales(bb), 0u, 0u);
            }
        }
        // Activation blocks: item (token t, block k).
        for (uint it = tid; it < uint(TN * KB); it += uint(WG)) {
            uint t = it / uint(KB);
            uint k = it % uint(KB);
            if (k < kbn) {
                uint tok = min(t0 + t, p.n_tok - 1u);
                uint ab = p.x_offset + tok * ROW_STRIDE + (blk0 + k) * ACT_WORDS;
                uint e = (k * uint(TN) + t) * 3u;
                xs[e] = uvec4(A[ab + 1u], A[ab + 2u], A[ab + 3u], A[ab + 4u]);
                xs[e + 1u] = uvec4(A[ab + 5u], A[ab + 6u], A[ab + 7u], A[ab + 8u]);
                xs[e + 2u] = uvec4(A[ab], 0u, 0u, 0u);
            }
        }
        barrier();
        for (uint k = 0u; k < kbn; k++) {
            uvec4 wlo[RM], whi[RM];
            uvec2 wsc[RM];
            for (uint i = 0u; i < uint(RM); i++) {
                uint e = (k * uint(TM) + tr + i * uint(LR)) * 3u;
                wlo[i] = ws[e];
                whi[i] = ws[e + 1u];
                wsc[i] = ws[e + 2u].xy;
            }
            for (uint j = 0u; j < uint(RT); j++) {
                uint e = (k * uint(TN) + tt + j * uint(LT)) * 3u;
                uvec4 alo = xs[e];
                uvec4 ahi = xs[e + 1u];
                uint head = xs[e + 2u].x;
                for (uint i = 0u; i < uint(RM); i++) {
                    int s = 0;
                    for (uint q = 0u; q < 4u; q++) {
                        s += sdot4(wlo[i][q], alo[q], 0) + sdot4(whi[i][q], ahi[q], 0);
                    }
                    acc[i * uint(RT) + j] += legacy_value(s, wsc[i], head);
                }
            }
        }
        barrier();
    }

    tile_store(acc);
}
