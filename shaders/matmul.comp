#version 450
// Prefill matmul: out[t, col0 + r] = sum_c W[r, c] * x[t, c] for a chunk of
// weight rows and n_tok activation rows. Workgroup (x, y) computes a tile of
// TM weight rows by TN tokens: per step it dequantizes TM rows of one window
// of a block (BK elements) into shared memory, loads the matching TN x BK
// activations, and every invocation accumulates 2 rows x 4 tokens.
// Bindings: 0 = weight chunk (uint words), 1 = x, 2 = out. Push: WeightPush.
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
layout(set = 0, binding = 1, std430) readonly buffer Xt { float X[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Ot { float O[]; };

#ifdef MATMUL_ID
layout(set = 0, binding = 3, std430) readonly buffer It { float IDS[]; };
layout(push_constant) uniform Push { WeightPush p; IdPush q; };
#else
layout(push_constant) uniform Push { WeightPush p; };
#endif

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

// Per invocation: the first element of x of each activation row it loads
// (load step m: row (tid + m * WG) / BK of the tile), and of out for its
// tokens tg..tg + 4.
#define XR (TN * BK / WG)
uint xr[XR];
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
    return p.x_offset + (q.x_per_slot != 0u ? s : s / q.k) * p.n_in;
}
uint o_row(uint s) {
    return p.out_offset + s * p.n_out;
}
#endif

// One TM x TN tile: weight rows r0.. of the matrix at byte wb against n_t
// activation rows (xr, orow).
void tile(uint r0, uint wb, uint n_t) {
    uint tid = gl_LocalInvocationID.x;
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
            ws[k * TM + r] = k0 + k < p.n_in ? weight_elem(wb + row * p.row_bytes, k0 + k) : 0.0;
        }
#else
        uint blk = k0 / BLOCK_ELEMS;
        uint win = (k0 % BLOCK_ELEMS) / WINDOW_ELEMS;
        for (uint i = tid; i < TM * UNITS_PER_WINDOW; i += WG) {
            uint r = i / UNITS_PER_WINDOW;
            uint row = min(r0 + r, p.rows - 1u);
            vec4 lo, hi;
            uint elo, ehi;
            dequant_unit(wb + row * p.row_bytes + blk * BLOCK_BYTES,
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
        for (uint m = 0u; m < XR; m++) {
            uint t = (tid + m * WG) / BK;
            xr[m] = t < n_t ? x_row(uint(SEL(t))) : 0u;
        }
        for (uint j = 0u; j < 4u; j++) {
            orow[j] = tg + j < n_t ? o_row(uint(SEL(tg + j))) : 0u;
        }
        barrier(); // SEL read by all before the tile overwrites xs
        tile(r0, wb, n_t);
    }
#else
    uint t0 = gl_WorkGroupID.y * TN;
    for (uint m = 0u; m < XR; m++) {
        xr[m] = p.x_offset + (t0 + (tid + m * WG) / BK) * p.n_in;
    }
    for (uint j = 0u; j < 4u; j++) {
        orow[j] = p.out_offset + (t0 + tg + j) * p.n_out + p.col0;
    }
    tile(r0, 0u, min(TN, p.n_tok - t0));
#endif
}
