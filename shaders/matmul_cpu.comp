#version 450
// Matrix products for CPU Vulkan implementations (lavapipe / llvmpipe):
// out[t, col0 + r] = sum_c W[r, c] * x[t, c], like matvec.comp (TOKENS = 1)
// and matmul.comp (TOKENS > 1), but with no shared memory and no barrier,
// which a CPU implementation runs as slow synchronisation between the SIMD
// batches of a workgroup. One invocation computes ROWS weight rows for
// TOKENS activation rows, walking the rows' blocks once: each unit of 8
// weights is dequantized once and used for all TOKENS activation rows, each
// activation vec4 is read once for the ROWS weight rows, and the sums stay
// in registers. A block's activations are loaded once per subgroup, one vec4
// per lane, and shuffled to the lanes (on a CPU implementation every lane's
// load of a varying address is a scalar load of its own: this cut decode by
// 3x on lavapipe). Sums are taken per block (8 values, then the units of a block)
// before they are added to the row's total, which keeps the f32 rounding
// below that of one long running sum.
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
// x in vec4s: a CPU implementation runs each buffer load instruction once
// per invocation, so one load of 4 values costs about what one of 1 does.
layout(set = 0, binding = 1, std430) readonly buffer Xt { vec4 X4[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Ot { float O[]; };

#ifdef MATMUL_ID
layout(set = 0, binding = 3, std430) readonly buffer It { float IDS[]; };
layout(push_constant) uniform Push { WeightPush p; IdPush q; };
#else
layout(push_constant) uniform Push { WeightPush p; };
#endif

// Prefill on the 32-element block types: each weight row's block is read
// once, word by word, into wc (at most 10 words: Q8_0's 34 bytes from a
// 2-byte offset), and dequantized from there (blocks.glsl reads through
// WORD), instead of a few loads per unit of 8 values.
#if TOKENS > 1 && (defined(WEIGHT_Q4_0) || defined(WEIGHT_Q4_1) || defined(WEIGHT_Q5_0) || defined(WEIGHT_Q5_1) || defined(WEIGHT_Q8_0))
#define WORD_CACHE 1
#define WC 10u
uint wc[WC];
uint wc0; // the buffer word wc[0] holds
#define WORD(i) wc[(i) - wc0]
#endif

#include "blocks.glsl"

// Lanes of a subgroup that share a block's activations (the host uses these
// kernels only where the subgroup size is a multiple of this: KernelLayout::
// cpu_supported) and the vec4s of a block each lane holds.
#define SG 8u
#ifndef FLOAT_WEIGHTS
#define XV ((BLOCK_ELEMS / 4u + SG - 1u) / SG)
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
#elif defined(WORD_CACHE)
    // 32-element blocks: the block's 8 vec4s of activations per token
    // (one load per lane, then shuffles), and each row's block words once.
    uint n_blocks = p.n_in / BLOCK_ELEMS;
    uint lane = gl_SubgroupInvocationID % SG;
    for (uint blk = 0u; blk < n_blocks; blk++) {
        uint xb = blk * BLOCK_ELEMS;
        vec4 xs[TOKENS * 8u];
        for (uint t = 0u; t < TOKENS; t++) {
            vec4 xl = X4[((xo[t] + xb) >> 2) + lane];
            for (uint c = 0u; c < 8u; c++) {
                xs[t * 8u + c] = subgroupShuffle(xl, c);
            }
        }
        for (uint r = 0u; r < ROWS; r++) {
            uint bb = rbs[r] + blk * BLOCK_BYTES;
            wc0 = bb >> 2;
            // Only the words the block touches: never past the buffer.
            uint nw = ((bb & 3u) + BLOCK_BYTES + 3u) >> 2;
            for (uint k = 0u; k < WC; k++) {
                if (k < nw) {
                    wc[k] = W[wc0 + k];
                }
            }
            float part[TOKENS];
            for (uint t = 0u; t < TOKENS; t++) {
                part[t] = 0.0;
            }
            for (uint u = 0u; u < UNITS; u++) {
                vec4 lo, hi;
                uint elo, ehi;
                dequant_unit(bb, u, lo, hi, elo, ehi);
                for (uint t = 0u; t < TOKENS; t++) {
                    part[t] += dot(lo, xs[t * 8u + (elo >> 2)]) + dot(hi, xs[t * 8u + (ehi >> 2)]);
                }
            }
            for (uint t = 0u; t < TOKENS; t++) {
                acc[r * TOKENS + t] += part[t];
            }
        }
    }
#else
    uint n_blocks = p.n_in / BLOCK_ELEMS;
    // Lanes past SG (subgroups of 16, 32, ...) load again what lane
    // `lane % SG` loads; the shuffles read lanes 0..SG only.
    uint lane = gl_SubgroupInvocationID % SG;
    for (uint blk = 0u; blk < n_blocks; blk++) {
        uint xb = blk * BLOCK_ELEMS;
        // The block's activations, spread over the subgroup: lane l holds
        // vec4s l, l + SG, ... of each token's block (one load per lane
        // instead of one per unit and lane); units take theirs by shuffle.
        vec4 xl[TOKENS * XV];
        for (uint t = 0u; t < TOKENS; t++) {
            for (uint k = 0u; k < XV; k++) {
                xl[t * XV + k] = X4[((xo[t] + xb) >> 2) + k * SG + lane];
            }
        }
        float part[ROWS * TOKENS];
        for (uint j = 0u; j < ROWS * TOKENS; j++) {
            part[j] = 0.0;
        }
#if defined(WEIGHT_Q8_0) && TOKENS == 1
        // A Q8_0 block (34 bytes) starts at an even byte: the 9 words that
        // hold it are read once, and its units cut from them (dequant_unit
        // reads 2-byte-aligned words two loads at a time). Same values. For
        // decode only (the output head is often Q8_0): 23 ms instead of 32
        // for 576 x 49152 on lavapipe; with 8 x 4 outputs per invocation the
        // words held cost more than the loads they save.
        uint qw[ROWS * 9u];
        bool shifted[ROWS]; // the block starts 2 bytes into its first word
        float qd[ROWS];
        for (uint r = 0u; r < ROWS; r++) {
            uint bb = rbs[r] + blk * BLOCK_BYTES;
            for (uint k = 0u; k < 9u; k++) {
                // At most the word that holds the block's last byte: inside
                // the buffer (rounded up to whole words).
                qw[r * 9u + k] = W[(bb >> 2) + k];
            }
            shifted[r] = (bb & 2u) != 0u;
            qd[r] = half_bits(shifted[r] ? qw[r * 9u] >> 16 : qw[r * 9u] & 0xffffu);
        }
#endif
        for (uint u = 0u; u < UNITS; u++) {
            vec4 lo[ROWS], hi[ROWS];
            uint elo, ehi; // the same for every row
#if defined(WEIGHT_Q8_0) && TOKENS == 1
            for (uint r = 0u; r < ROWS; r++) {
                uint a = qw[r * 9u + 2u * u];
                uint b = qw[r * 9u + 2u * u + 1u];
                uint c = qw[r * 9u + 2u * u + 2u];
                lo[r] = i8x4(shifted[r] ? b : (a >> 16) | (b << 16)) * qd[r];
                hi[r] = i8x4(shifted[r] ? c : (b >> 16) | (c << 16)) * qd[r];
            }
            elo = 8u * u;
            ehi = 8u * u + 4u;
#else
            for (uint r = 0u; r < ROWS; r++) {
                dequant_unit(rbs[r] + blk * BLOCK_BYTES, u, lo[r], hi[r], elo, ehi);
            }
#endif
            for (uint t = 0u; t < TOKENS; t++) {
                // Block types: rows are whole blocks (multiples of 32
                // elements) and views start at whole rows, so a and b are
                // multiples of 4.
                uint a = elo >> 2;
                uint b = ehi >> 2;
                vec4 x0 = subgroupShuffle(xl[t * XV + a / SG], a % SG);
                vec4 x1 = subgroupShuffle(xl[t * XV + b / SG], b % SG);
                for (uint r = 0u; r < ROWS; r++) {
                    part[r * TOKENS + t] += dot(lo[r], x0) + dot(hi[r], x1);
                }
            }
        }
        for (uint j = 0u; j < ROWS * TOKENS; j++) {
            acc[j] += part[j];
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
    return p.x_offset + (q.x_per_slot != 0u ? s : s / q.k) * p.n_in;
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
        xo[t] = p.x_offset + min(t0 + t, p.n_tok - 1u) * p.n_in;
        oo[t] = p.out_offset + (t0 + t) * p.n_out + p.col0;
    }
    product(row0, 0u, min(TOKENS, p.n_tok - t0));
#endif
}
