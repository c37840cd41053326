#version 450
// Prefill matmul: out[t, col0 + r] = sum_c W[r, c] * x[t, c] for a chunk of
// weight rows and n_tok activation rows. Workgroup (x, y) computes a tile of
// TM weight rows by TN tokens: per step it dequantizes TM rows of one window
// of a block (BK elements) into shared memory, loads the matching TN x BK
// activations, and every invocation accumulates 2 rows x 4 tokens.
// Bindings: 0 = weight chunk (uint words), 1 = x, 2 = out. Push: WeightPush.
// Block weights: x holds the activation rows quantized to the type's dot
// format (quantize_act.comp; x_offset and the row stride count its u32
// words), and each invocation dots its 2 rows x 4 tokens block by block in
// integers (common/qdot.glsl, the CPU's products bit for bit), reading the
// blocks from memory (the workgroup's invocations share them in cache).
// (Devices with VK_KHR_shader_integer_dot_product take matmul_tiled.comp
// for the 32-element block types: the same bits.)
// MATMUL_ID (ggml mul_mat_id, prefill), grouped by expert: workgroup z is an
// expert of the chunk and y a window of TN of the (token, slot) pairs routed
// to it (in pair order: the invocations scan the ids, binding 3, together),
// stepping by the y count until the expert's pairs run out. Push:
// WeightPush, IdPush.

#include "weights.glsl"

#define WG 128u
#define TM 32u
#define TN 32u
layout(local_size_x = 128, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Wt { uint W[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Ot { float O[]; };

#ifdef MATMUL_ID
layout(set = 0, binding = 3, std430) readonly buffer It { float IDS[]; };
layout(push_constant) uniform Push { WeightPush p; IdPush q; };
#else
layout(push_constant) uniform Push { WeightPush p; };
#endif

#include "blocks.glsl"

#ifdef FLOAT_WEIGHTS
layout(set = 0, binding = 1, std430) readonly buffer Xt { float X[]; };
#define BK 32u

// ws is stored k-major (ws[k * TM + r]): the invocations of a row group read
// consecutive words. xs is token-major: its reads are broadcasts.
shared float ws[BK * TM];
shared float xs[TN * BK];

// Per invocation: the first element of x of each activation row it loads
// (load step m: row (tid + m * WG) / BK of the tile), and of out for its
// tokens tg..tg + 4.
#define XR (TN * BK / WG)
uint xr[XR];
#define ROW_STRIDE p.n_in
#else
layout(set = 0, binding = 1, std430) readonly buffer At { uint A[]; };
#define QT 4u
#include "qdot.glsl"
// The first word of x of the activation rows of tokens tg..tg + 4.
uint xq[4];
#define ROW_STRIDE ((p.n_in / BLOCK_ELEMS) * ACT_WORDS)
#ifdef MATMUL_ID
// The pair scan's shared memory (float: small integers, exact).
shared float xs[WG + TN + 1u];
#endif
#endif
uint orow[4];

#ifdef MATMUL_ID
// The pair scan has no shared memory of its own (ws and xs fill lavapipe's
// 32 KiB): it borrows xs, before the tile loads it, holding small integers
// as exact floats: per-invocation match counts (then their prefix sums) at
// 0..WG, the selected pairs at WG..WG + TN, their number at WG + TN.
#define SEG(i) xs[i]
#define SEL(i) xs[WG + (i)]
#define FOUND xs[WG + TN]

// Puts the pairs of rank w..w + TN among those routed to expert `id` (rank:
// pair order) in SEL; returns how many are routed to it.
uint select_pairs(float id, uint w) {
    uint tid = gl_LocalInvocationID.x;
    uint per = (p.n_tok + WG - 1u) / WG;
    uint a = min(tid * per, p.n_tok);
    uint b = min(a + per, p.n_tok);
    uint c = 0u;
    for (uint i = a; i < b; i++) {
        c += IDS[q.ids_offset + i] == id ? 1u : 0u;
    }
    SEG(tid) = float(c);
    barrier();
    if (tid == 0u) {
        float sum = 0.0;
        for (uint i = 0u; i < WG; i++) {
            float v = SEG(i);
            SEG(i) = sum;
            sum += v;
        }
        FOUND = sum;
    }
    barrier();
    uint r = uint(SEG(tid));
    for (uint i = a; i < b; i++) {
        if (IDS[q.ids_offset + i] == id) {
            if (r >= w && r < w + TN) {
                SEL(r - w) = float(i);
            }
            r++;
        }
    }
    barrier();
    return uint(FOUND);
}

// First element of the input row and of the output row of pair s.
uint x_row(uint s) {
    return p.x_offset + (q.x_per_slot != 0u ? s : s / q.k) * ROW_STRIDE;
}
uint o_row(uint s) {
    return p.out_offset + s * p.n_out;
}
#endif

// One TM x TN tile: weight rows r0.. of the matrix at byte wb against n_t
// activation rows (xr, orow).
#ifdef FLOAT_WEIGHTS
void tile(uint r0, uint wb, uint n_t) {
    uint tid = gl_LocalInvocationID.x;
    // Each invocation: rows rg and rg + 16 of the tile, tokens tg..tg + 4.
    uint rg = tid % 16u;
    uint tg = (tid / 16u) * 4u;
    vec4 acc0 = vec4(0.0);
    vec4 acc1 = vec4(0.0);
    for (uint k0 = 0u; k0 < p.n_in; k0 += BK) {
        for (uint i = tid; i < TM * BK; i += WG) {
            uint r = i / BK;
            uint k = i % BK;
            // Rows past the chunk read its last row: their outputs are not written.
            uint row = min(r0 + r, p.rows - 1u);
            ws[k * TM + r] = k0 + k < p.n_in ? weight_elem(wb + row * p.row_bytes, k0 + k) : 0.0;
        }
        for (uint m = 0u; m < XR; m++) {
            uint i = tid + m * WG;
            uint t = i / BK;
            uint k = i % BK;
            bool inside = t < n_t && k0 + k < p.n_in;
            xs[i] = inside ? X[xr[m] + k0 + k] : 0.0;
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
        if (tg + j < n_t) {
            uint o = orow[j] + r0;
            if (r0 + rg < p.rows) {
                O[o + rg] = acc0[j];
            }
            if (r0 + rg + 16u < p.rows) {
                O[o + rg + 16u] = acc1[j];
            }
        }
    }
}

#else
// The same tile of block weights: per block, rows rg and rg + 16 (clamped
// to the chunk) against the blocks of tokens tg..tg + 4 (xq).
void tile(uint r0, uint wb, uint n_t) {
    uint tid = gl_LocalInvocationID.x;
    uint rg = tid % 16u;
    uint tg = (tid / 16u) * 4u;
    float acc0[4], acc1[4];
    for (uint j = 0u; j < 4u; j++) {
        acc0[j] = 0.0;
        acc1[j] = 0.0;
    }
    uint rb0 = wb + min(r0 + rg, p.rows - 1u) * p.row_bytes;
    uint rb1 = wb + min(r0 + rg + 16u, p.rows - 1u) * p.row_bytes;
    uint nb = p.n_in / BLOCK_ELEMS;
    uint ab[4];
    for (uint blk = 0u; blk < nb; blk++) {
        for (uint j = 0u; j < 4u; j++) {
            ab[j] = xq[j] + blk * ACT_WORDS;
        }
        qdot_block(rb0 + blk * BLOCK_BYTES, ab, acc0);
        qdot_block(rb1 + blk * BLOCK_BYTES, ab, acc1);
    }
    for (uint j = 0u; j < 4u; j++) {
        if (tg + j < n_t) {
            uint o = orow[j] + r0;
            if (r0 + rg < p.rows) {
                O[o + rg] = acc0[j];
            }
            if (r0 + rg + 16u < p.rows) {
                O[o + rg + 16u] = acc1[j];
            }
        }
    }
}
#endif

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint r0 = gl_WorkGroupID.x * TM;
    uint tg = (tid / 16u) * 4u;
#ifdef MATMUL_ID
    float id = float(q.e0 + gl_WorkGroupID.z);
    uint wb = gl_WorkGroupID.z * p.rows * p.row_bytes;
    for (uint w = gl_WorkGroupID.y * TN;; w += gl_NumWorkGroups.y * TN) {
        uint n = select_pairs(id, w); // uniform: read from shared memory
        if (w >= n) {
            break;
        }
        uint n_t = min(TN, n - w);
#ifdef FLOAT_WEIGHTS
        for (uint m = 0u; m < XR; m++) {
            uint t = (tid + m * WG) / BK;
            xr[m] = t < n_t ? x_row(uint(SEL(t))) : 0u;
        }
#else
        for (uint j = 0u; j < 4u; j++) {
            xq[j] = x_row(uint(SEL(min(tg + j, n_t - 1u))));
        }
#endif
        for (uint j = 0u; j < 4u; j++) {
            orow[j] = tg + j < n_t ? o_row(uint(SEL(tg + j))) : 0u;
        }
        barrier(); // SEL read by all before the tile overwrites xs
        tile(r0, wb, n_t);
    }
#else
    uint t0 = gl_WorkGroupID.y * TN;
#ifdef FLOAT_WEIGHTS
    for (uint m = 0u; m < XR; m++) {
        xr[m] = p.x_offset + (t0 + (tid + m * WG) / BK) * p.n_in;
    }
#else
    for (uint j = 0u; j < 4u; j++) {
        xq[j] = p.x_offset + min(t0 + tg + j, p.n_tok - 1u) * ROW_STRIDE;
    }
#endif
    for (uint j = 0u; j < 4u; j++) {
        orow[j] = p.out_offset + (t0 + tg + j) * p.n_out + p.col0;
    }
    tile(r0, 0u, min(TN, p.n_tok - t0));
#endif
}
