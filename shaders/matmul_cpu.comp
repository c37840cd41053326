#version 450
// Matrix products for CPU Vulkan implementations (lavapipe / llvmpipe):
// out[t, col0 + r] = sum_c W[r, c] * x[t, c], like matvec.comp (TOKENS = 1)
// and matmul.comp (TOKENS > 1), but with no shared memory and no barrier,
// which a CPU implementation runs as slow synchronisation between the SIMD
// batches of a workgroup. One invocation computes ROWS weight rows for
// TOKENS activation rows, walking the rows' blocks once.
//
// Float weights (x in f32): each unit of 4 weights is read once for all
// TOKENS activation rows, each activation vec4 once for the ROWS weight
// rows, partial sums per FLOAT_SPAN elements. Block weights: x holds the
// activation rows quantized to the type's dot format (quantize_act.comp;
// offsets and row strides count its u32 words) and each block is dotted in
// integers for the TOKENS rows at once (common/qdot.glsl: the CPU's
// products bit for bit). On a CPU implementation every lane's load of a
// varying address is a scalar load of its own, and a word read across a
// word boundary two: a block's activation words are loaded once per
// subgroup, one word per lane, and shuffled to every lane (once for the
// ROWS weight rows), and each weight row's block is read word by word
// into registers, realigned to its first byte, before it is dotted from
// there (blocks.glsl reads through WORD).
//
// Grid: TOKENS = 1: one invocation per ROWS weight rows, 1-D (spilling into
// y past the x limit: global_index_1d). TOKENS > 1: x over weight rows, y
// over groups of TOKENS activation rows. A partial group reads the last row
// (weight or activation) again and writes only its own.
// Bindings: 0 = weight chunk (uint words), 1 = x, 2 = out. Push: WeightPush.
//
// MATMUL_ID (ggml mul_mat_id; binding 3 = ids; push: WeightPush, IdPush):
// TOKENS = 1: workgroup z is a (token, slot) pair, its expert read from the
// ids (decode: all k slots in one dispatch). TOKENS > 1, grouped by expert:
// z is an expert of the chunk, y a window of TOKENS of the pairs routed to
// it (each invocation scans the ids for them, in pair order), stepping by
// the y count until the expert's pairs run out.

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

#include "weights.glsl"
#include "index.glsl"

#if !defined(TOKENS) || !defined(ROWS)
#error "matmul_cpu.comp: TOKENS and ROWS (activation and weight rows per invocation) must be set"
#endif

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Wt { uint W[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Ot { float O[]; };

#ifdef MATMUL_ID
layout(set = 0, binding = 3, std430) readonly buffer It { float IDS[]; };
layout(push_constant) uniform Push { WeightPush p; IdPush q; };
#else
layout(push_constant) uniform Push { WeightPush p; };
#endif

// Block types: the words of the weight block being dotted, from its first
// byte (qdot_block then reads the block at byte 0); WC: ceil(bytes / 4).
#if defined(WEIGHT_Q4_0)
#define WC 5u
#elif defined(WEIGHT_Q4_1)
#define WC 5u
#elif defined(WEIGHT_Q5_0)
#define WC 6u
#elif defined(WEIGHT_Q5_1)
#define WC 6u
#elif defined(WEIGHT_Q8_0)
#define WC 9u
#elif defined(WEIGHT_Q2_K)
#define WC 21u
#elif defined(WEIGHT_Q3_K)
#define WC 28u
#elif defined(WEIGHT_Q4_K)
#define WC 36u
#elif defined(WEIGHT_Q5_K)
#define WC 44u
#elif defined(WEIGHT_Q6_K)
#define WC 53u
#endif
#ifdef WC
uint wc[WC];
#define WORD(i) wc[i]
#endif

#include "blocks.glsl"

#ifdef FLOAT_WEIGHTS
// x in vec4s: a CPU implementation runs each buffer load instruction once
// per invocation, so one load of 4 values costs about what one of 1 does.
layout(set = 0, binding = 1, std430) readonly buffer Xt { vec4 X4[]; };
#define ROW_STRIDE p.n_in
#else
layout(set = 0, binding = 1, std430) readonly buffer At { uint A[]; };
// The TOKENS rows' activation blocks, in every lane: Q8_0 / Q8_1 blocks of
// 9 words for the 32-element weight blocks, Q8_K blocks of 73 otherwise.
#define XW (BLOCK_ELEMS == 32u ? 9u : 73u)
uint xs[TOKENS * XW];
#define ACT(ab, t, k) xs[(t) * XW + (k)]
#define QT TOKENS
#include "qdot.glsl"
// Lanes of a subgroup that share the loads of a block's activation words
// (the host uses these kernels only where the subgroup size is a multiple
// of this: KernelLayout::cpu_supported), and the words each lane loads.
#define SG 8u
#define XV ((XW + SG - 1u) / SG)
#define ROW_STRIDE ((p.n_in / BLOCK_ELEMS) * ACT_WORDS)
#endif

// Elements of a float row summed before they join the row's total.
#define FLOAT_SPAN 32u

// The product of weight rows row0.. of the matrix at byte wb with n_t
// activation rows: row t starts at element xo[t] of x (past n_t: the last
// one again) and its outputs at element oo[t] of out.
uint xo[TOKENS];
uint oo[TOKENS];

void product(uint row0, uint wb, uint n_t) {
    // First byte of each weight row (clamped to the last real one).
    uint rbs[ROWS];
    for (uint r = 0u; r < ROWS; r++) {
        rbs[r] = wb + min(row0 + r, p.rows - 1u) * p.row_bytes;
    }
    float acc[ROWS * TOKENS];
    for (uint i = 0u; i < ROWS * TOKENS; i++) {
        acc[i] = 0.0;
    }
#ifdef FLOAT_WEIGHTS
    // Rows of any length: vec4 reads of x only when every row starts at a
    // multiple of 4 elements (views start at whole rows).
    uint n4 = (p.n_in & 3u) == 0u ? p.n_in : 0u;
    for (uint c0 = 0u; c0 < n4; c0 += FLOAT_SPAN) {
        uint c1 = min(c0 + FLOAT_SPAN, n4);
        float part[ROWS * TOKENS];
        for (uint j = 0u; j < ROWS * TOKENS; j++) {
            part[j] = 0.0;
        }
        for (uint i = c0; i < c1; i += 4u) {
            vec4 w[ROWS];
            for (uint r = 0u; r < ROWS; r++) {
                w[r] = vec4(weight_elem(rbs[r], i), weight_elem(rbs[r], i + 1u),
                            weight_elem(rbs[r], i + 2u), weight_elem(rbs[r], i + 3u));
            }
            for (uint t = 0u; t < TOKENS; t++) {
                vec4 x = X4[(xo[t] + i) >> 2];
                for (uint r = 0u; r < ROWS; r++) {
                    part[r * TOKENS + t] += dot(w[r], x);
                }
            }
        }
        for (uint j = 0u; j < ROWS * TOKENS; j++) {
            acc[j] += part[j];
        }
    }
    for (uint i = n4; i < p.n_in; i++) {
        for (uint t = 0u; t < TOKENS; t++) {
            uint a = xo[t] + i;
            float x = X4[a >> 2][a & 3u];
            for (uint r = 0u; r < ROWS; r++) {
                acc[r * TOKENS + t] += weight_elem(rbs[r], i) * x;
            }
        }
    }
#else
    uint n_blocks = p.n_in / BLOCK_ELEMS;
    // Lanes past SG (subgroups of 16, 32, ...) load again what lane
    // `lane % SG` loads; the shuffles read lanes 0..SG only.
    uint lane = gl_SubgroupInvocationID % SG;
    uint ab[TOKENS]; // unused: the blocks are read from xs
    for (uint blk = 0u; blk < n_blocks; blk++) {
        for (uint t = 0u; t < TOKENS; t++) {
            ab[t] = 0u;
            // Lane l loads words l, l + SG, ... (the last one again past
            // the block's end), then every lane takes them all.
            uint a0 = xo[t] + blk * ACT_WORDS;
            uint xl[XV];
            for (uint k = 0u; k < XV; k++) {
                xl[k] = A[a0 + min(k * SG + lane, ACT_WORDS - 1u)];
            }
            for (uint k = 0u; k < XV; k++) {
                for (uint j = 0u; j < SG; j++) {
                    if (k * SG + j < XW) {
                        xs[t * XW + k * SG + j] = subgroupShuffle(xl[k], j);
                    }
                }
            }
        }
        for (uint r = 0u; r < ROWS; r++) {
            // The row's block into wc, realigned to its first byte (blocks
            // of 2 mod 4 bytes may start 2 bytes into a word; the words
            // loaded end with the block's last byte's).
            uint bb = rbs[r] + blk * BLOCK_BYTES;
            for (uint k = 0u; k < WC; k++) {
                wc[k] = W[(bb >> 2) + k];
            }
            if ((BLOCK_BYTES & 3u) != 0u && (bb & 2u) != 0u) {
                for (uint k = 0u; k + 1u < WC; k++) {
                    wc[k] = (wc[k] >> 16) | (wc[k + 1u] << 16);
                }
                wc[WC - 1u] >>= 16;
            }
            float part[TOKENS];
            for (uint t = 0u; t < TOKENS; t++) {
                part[t] = acc[r * TOKENS + t];
            }
            qdot_block(0u, ab, part);
            for (uint t = 0u; t < TOKENS; t++) {
                acc[r * TOKENS + t] = part[t];
            }
        }
    }
#endif
    for (uint t = 0u; t < TOKENS; t++) {
        for (uint r = 0u; r < ROWS; r++) {
            if (t < n_t && row0 + r < p.rows) {
                O[oo[t] + row0 + r] = acc[r * TOKENS + t];
            }
        }
    }
}

#ifdef MATMUL_ID
// First element of the input row and of the output row of pair s.
uint x_row(uint s) {
    return p.x_offset + (q.x_per_slot != 0u ? s : s / q.k) * ROW_STRIDE;
}
uint o_row(uint s) {
    return p.out_offset + s * p.n_out;
}
#endif

void main() {
#if TOKENS == 1
    uint row0 = global_index_1d() * ROWS;
#else
    uint row0 = gl_GlobalInvocationID.x * ROWS;
#endif
    // Invocations past the last row stay (their subgroup's shuffles need
    // every lane): they read the last row again and write nothing.
#if defined(MATMUL_ID) && TOKENS == 1
    uint s = gl_WorkGroupID.z;
    float id = IDS[q.ids_offset + s];
    if (!(id >= float(q.e0) && id < float(q.e0 + q.n_e))) {
        return;
    }
    xo[0] = x_row(s);
    oo[0] = o_row(s);
    product(row0, (uint(id) - q.e0) * p.rows * p.row_bytes, 1u);
#elif defined(MATMUL_ID)
    float id = float(q.e0 + gl_WorkGroupID.z);
    uint wb = gl_WorkGroupID.z * p.rows * p.row_bytes;
    for (uint w = gl_WorkGroupID.y * TOKENS;; w += gl_NumWorkGroups.y * TOKENS) {
        // The pairs of rank w..w + TOKENS routed to the expert.
        uint n = 0u;
        for (uint i = 0u; i < p.n_tok; i++) {
            if (IDS[q.ids_offset + i] == id) {
                if (n >= w && n < w + TOKENS) {
                    xo[n - w] = x_row(i);
                    oo[n - w] = o_row(i);
                }
                n++;
            }
        }
        if (w >= n) {
            return;
        }
        uint n_t = min(TOKENS, n - w);
        for (uint t = n_t; t < TOKENS; t++) {
            xo[t] = xo[n_t - 1u];
        }
        product(row0, wb, n_t);
    }
#else
    uint t0 = gl_WorkGroupID.y * TOKENS;
    for (uint t = 0u; t < TOKENS; t++) {
        xo[t] = p.x_offset + min(t0 + t, p.n_tok - 1u) * ROW_STRIDE;
        oo[t] = p.out_offset + (t0 + t) * p.n_out + p.col0;
    }
    product(row0, 0u, min(TOKENS, p.n_tok - t0));
#endif
}
