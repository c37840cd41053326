#version 450
// Prefill matmul: out[t, col0 + r] = sum_c W[r, c] * x[t, c] for a chunk of
// weight rows and n_tok activation rows. Workgroup (x, y) computes a tile of
// TM weight rows by TN tokens: per step it dequantizes TM rows of one window
// of a block (BK elements) into shared memory, loads the matching TN x BK
// activations, and every invocation accumulates 2 rows x 4 tokens.
// Bindings: 0 = weight chunk (uint words), 1 = x, 2 = out. Push: WeightPush.

#include "weights.glsl"

#define WG 128u
#define TM 32u
#define TN 32u
layout(local_size_x = 128, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Wt { uint W[]; };
layout(set = 0, binding = 1, std430) readonly buffer Xt { float X[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Ot { float O[]; };

layout(push_constant) uniform Push { WeightPush p; };

#include "blocks.glsl"

#ifdef FLOAT_WEIGHTS
#define BK 32u
#else
#define BK WINDOW_ELEMS
#endif

// ws is stored k-major (ws[k * TM + r]): the invocations of a row group read
// consecutive words. xs is token-major: its reads are broadcasts. At BK = 128
// the two take 32 KiB, the least maxComputeSharedMemorySize seen (lavapipe).
shared float ws[BK * TM];
shared float xs[TN * BK];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint r0 = gl_WorkGroupID.x * TM;
    uint t0 = gl_WorkGroupID.y * TN;
    // Each invocation: rows rg and rg + 16 of the tile, tokens tg..tg + 4.
    uint rg = tid % 16u;
    uint tg = (tid / 16u) * 4u;
    vec4 acc0 = vec4(0.0);
    vec4 acc1 = vec4(0.0);
    for (uint k0 = 0u; k0 < p.n_in; k0 += BK) {
#ifdef FLOAT_WEIGHTS
        for (uint i = tid; i < TM * BK; i += WG) {
            uint r = i / BK;
            uint k = i % BK;
            // Rows past the chunk read its last row: their outputs are not written.
            uint row = min(r0 + r, p.rows - 1u);
            ws[k * TM + r] = k0 + k < p.n_in ? weight_elem(row * p.row_bytes, k0 + k) : 0.0;
        }
#else
        uint blk = k0 / BLOCK_ELEMS;
        uint win = (k0 % BLOCK_ELEMS) / WINDOW_ELEMS;
        for (uint i = tid; i < TM * UNITS_PER_WINDOW; i += WG) {
            uint r = i / UNITS_PER_WINDOW;
            uint row = min(r0 + r, p.rows - 1u);
            vec4 lo, hi;
            uint elo, ehi;
            dequant_unit(row * p.row_bytes + blk * BLOCK_BYTES,
                         win * UNITS_PER_WINDOW + i % UNITS_PER_WINDOW, lo, hi, elo, ehi);
            uint a = (elo - win * WINDOW_ELEMS) * TM + r;
            uint b = (ehi - win * WINDOW_ELEMS) * TM + r;
            ws[a] = lo.x;
            ws[a + TM] = lo.y;
            ws[a + 2u * TM] = lo.z;
            ws[a + 3u * TM] = lo.w;
            ws[b] = hi.x;
            ws[b + TM] = hi.y;
            ws[b + 2u * TM] = hi.z;
            ws[b + 3u * TM] = hi.w;
        }
#endif
        for (uint i = tid; i < TN * BK; i += WG) {
            uint t = i / BK;
            uint k = i % BK;
            bool inside = t0 + t < p.n_tok && k0 + k < p.n_in;
            xs[i] = inside ? X[p.x_offset + (t0 + t) * p.n_in + k0 + k] : 0.0;
        }
        barrier();
        for (uint k = 0u; k < BK; k++) {
            vec4 x = vec4(xs[tg * BK + k], xs[(tg + 1u) * BK + k],
                          xs[(tg + 2u) * BK + k], xs[(tg + 3u) * BK + k]);
            acc0 += ws[k * TM + rg] * x;
            acc1 += ws[k * TM + rg + 16u] * x;
        }
        barrier();
    }
    for (uint j = 0u; j < 4u; j++) {
        uint t = t0 + tg + j;
        if (t < p.n_tok) {
            uint o = p.out_offset + t * p.n_out + p.col0 + r0;
            if (r0 + rg < p.rows) {
                O[o + rg] = acc0[j];
            }
            if (r0 + rg + 16u < p.rows) {
                O[o + rg + 16u] = acc1[j];
            }
        }
    }
}
