#version 450
#ifdef SG_RED
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
// Decode matvec: out[col0 + r] = sum_c W[r, c] * x[c] for the one activation row.
// Bindings: 0 = weight chunk (uint words), 1 = x, 2 = out. Push: WeightPush.
// MATMUL_ID (ggml mul_mat_id, decode): workgroup z is a (token, slot) pair,
// the expert read from binding 3 (ids); the chunk's other experts' pairs
// leave at once. Push: WeightPush, IdPush.
//
// Float weights (x in f32): one workgroup per NR weight rows (spilling into
// y past the x limit); its 128 invocations stride over the elements, each
// loading an activation once for the NR rows, then reduce in shared memory.
//
// Block weights: x is the activation row quantized to the type's dot format
// (quantize_act.comp; x_offset and the row stride count its u32 words) and
// each block is dotted in integers (common/qdot.glsl, the CPU's products bit
// for bit). A workgroup computes ROWS_PER_WG weight rows, TPR invocations
// per row striding over its blocks, then sums their partial sums in shared
// memory. KSPLIT (the super-block types): each block in KSPLIT parts on
// consecutive lanes, their exact integer sums added before the block's f32
// term (a quarter of the serial work per lane; each block's term the bits
// one lane takes for it).
//
// Fused variants (block types whose dot format is Q8_0, Q8_1 or Q8_K; one
// activation row of at most MAX_K elements; op_matvec_fused.rs): instead of
// reading x already quantized, every workgroup first computes the row
// itself into shared memory and quantizes it there (common/quant_row.glsl
// or quant_row_k.glsl, quantize_act.comp's bytes), from f32 inputs at
// binding 1:
//   PRO_QUANT: x itself (f32);
//   PRO_NORM:  the RMS norm of binding 1 times its weight (binding 3), as
//              rms_norm.comp computes it (common/rms.glsl);
//   PRO_GLU:   SwiGLU / GeGLU (FusedPush.op) of binding 1 and binding 3, as
//              binary.comp computes it;
// with PRO_OUT, workgroup 0 also writes those f32 values (the unfused op's
// output) to binding 4. EPI_ADD: each result is also added to the residual
// (the next binding), r[i] = r[i] + out[i], as binary.comp adds.
// PAIR_GLU (with PRO_NORM and PRO_OUT): two products of the normed row at
// once, the gate's (binding 0, out at binding 2) and the up projection's
// (binding 5, out at binding 6 from element res_offset), ROWS_PER_WG / 2
// rows of each per workgroup, and the gated unit of the two
// (FusedPush.op) written in place of the gate's result, as binary.comp's
// in-place SwiGLU / GeGLU leaves it. The same bits as the unfused ops;
// one dispatch and one barrier fewer for each.
// EPI_ROPE (with PRO_NORM; op_matvec_fused.rs's rope_into_matvec and
// kv_into_matvec): the products of one row are the Q, K or V of a decode
// step, written in pairs of rows (2i, 2i + 1) by the even row's lane 0:
// with RopeEpi.rope, rotated as rope.comp rotates NORM pairs (all of each
// head, common/rope.glsl); with RopeEpi.kv,
// also written to the cache row at position step_words[kv_pos_at] as
// kv_write.comp writes it (1: f32; 2: f16 rounded to nearest even, the
// pair one word). Bindings after the prologue's: the step words, the
// cache (u32 words; bound to the output when kv is 0). A dispatch and a
// barrier fewer again: attention follows the products at once.
// EPI_POST_NORM (with PRO_QUANT; op_matvec_fused.rs post_norm_into_matvec):
// the output row's RMS norm (one group of all the rows, eps f.eps, weight
// at binding 3) in place and its add into the residual (binding 4 from
// element res_offset), as rms_norm.comp's ADD_TO writes them, by the
// workgroup that counts itself done last on binding 5's word 0 (which it
// puts back to zero): a post-norm and its residual add with no dispatch
// or barrier of their own (Gemma-3).
// MULTI (with PRO_NORM, PRO_OUT and EPI_ROPE; op_matvec_multi.rs): up to
// three products of the one normed row in one dispatch (a layer's Q, K and
// V): segment s's weight, output and cache at bindings (0, 2, 6), (7, 8,
// 9), (10, 11, 12); its workgroups follow the previous segment's, each
// workgroup one segment's rows, uniform over it. Per segment MultiEpi
// holds its rows, output offset, epilogue (rope, cache write), cache row
// width and positions; every row the bits of its own dispatch's variant.
// Push: WeightPush, FusedPush (EPI_ROPE: then RopeEpi; MULTI: MultiEpi).
// SG_RED (the fused variants' `_sg` twins, for devices with subgroup
// shuffles; op_matvec_fused.rs): where the workgroup is whole subgroups of
// at least 8 invocations (checked here, uniform), the invocations count
// subgroup by subgroup, and the shared-memory trees' steps within a
// subgroup (the norm's sum of squares, the activation quantizer's block
// folds, the super-block parts' sums and each row's partial sums) are
// shuffles instead: the same operands in the same order (an xor butterfly
// gives lane 0 the tree's sums), so the same bits, with most of the
// barriers gone. Otherwise it runs the trees as the plain variant does.

#include "weights.glsl"

#define WG 128u
layout(local_size_x = 128, local_size_y = 1, local_size_z = 1) in;

#ifdef SG_RED
// Whether the trees end in subgroup shuffles (uniform; set by main).
bool sg = false;
#define RMS_SG sg
#define QUANT_SG sg
#endif

layout(set = 0, binding = 0, std430) readonly buffer Wt { uint W[]; };
#ifdef EPI_POST_NORM
// The last workgroup reads the others' outputs.
layout(set = 0, binding = 2, std430) coherent buffer Ot { float O[]; };
#else
layout(set = 0, binding = 2, std430) writeonly buffer Ot { float O[]; };
#endif

#if defined(PRO_QUANT) || defined(PRO_NORM) || defined(PRO_GLU)
#define PROLOGUE 1
// FusedPush of op_matvec_fused.rs: element offsets of the f32 input
// (binding 1), of the norm weight or the gated unit's second input
// (binding 3), of the prologue's f32 output (PRO_OUT) and of the residual
// (EPI_ADD); the norm's eps; the gated unit (0: SwiGLU, 1: GeGLU).
struct FusedPush {
    uint src_offset;
    uint aux_offset;
    uint pro_out_offset;
    uint res_offset;
    float eps;
    uint op;
};
#ifdef EPI_ROPE
// rope_into_matvec / kv_into_matvec's RopeEpi: whether to rotate, the head
// dim, the step word of the position, the CPU's theta_scale and
// freq_scale; the cache write (0 none, 1 f32, 2 f16), the step word of its
// position and the cache's row width.
struct RopeEpi {
    uint rope;
    uint head_dim;
    uint pos_at;
    float theta_scale;
    float freq_scale;
    uint kv;
    uint kv_pos_at;
    uint kv_width;
};
#ifdef MULTI
// op_matvec_multi.rs's MultiEpi: the rope's head dim, theta_scale and
// freq_scale; then per segment (four words each) its rows, output element
// offset, flags (bit 0: rotate; bits 1-2: the cache write, 0 none, 1 f32,
// 2 f16; bit 3, segment 0 only: write the norm to binding 4) with the
// cache row width from bit 8, and the step words of its rope's position
// (bits 0-15) and its cache write's (bits 16-31).
struct MultiEpi {
    uint head_dim;
    float theta_scale;
    float freq_scale;
    uint seg[12];
};
layout(push_constant) uniform Push { WeightPush p; FusedPush f; MultiEpi m; };
#else
layout(push_constant) uniform Push { WeightPush p; FusedPush f; RopeEpi e; };
#endif
#else
layout(push_constant) uniform Push { WeightPush p; FusedPush f; };
#endif
#elif defined(MATMUL_ID)
layout(set = 0, binding = 3, std430) readonly buffer It { float IDS[]; };
layout(push_constant) uniform Push { WeightPush p; IdPush q; };
#else
layout(push_constant) uniform Push { WeightPush p; };
#endif

#ifdef PAIR_GLU
layout(set = 0, binding = 5, std430) readonly buffer Wt2 { uint W2[]; };
layout(set = 0, binding = 6, std430) writeonly buffer Ot2 { float O2[]; };
// Which weight this invocation's row reads (uniform over a subgroup of
// whole rows).
bool use_w2 = false;
#define WORD(i) (use_w2 ? W2[i] : W[i])
#define RP (ROWS_PER_WG / 2u)
#endif

#ifdef MULTI
layout(set = 0, binding = 7, std430) readonly buffer Wt2 { uint W2[]; };
layout(set = 0, binding = 8, std430) writeonly buffer Ot2 { float O2[]; };
layout(set = 0, binding = 9, std430) writeonly buffer Kv2 { uint cache2[]; };
layout(set = 0, binding = 10, std430) readonly buffer Wt3 { uint W3[]; };
layout(set = 0, binding = 11, std430) writeonly buffer Ot3 { float O3[]; };
layout(set = 0, binding = 12, std430) writeonly buffer Kv3 { uint cache3[]; };
// This workgroup's segment (uniform over it).
uint seg = 0u;
#define WORD(i) (seg == 0u ? W[i] : (seg == 1u ? W2[i] : W3[i]))
#endif

#include "blocks.glsl"

#ifdef FLOAT_WEIGHTS
layout(set = 0, binding = 1, std430) readonly buffer Xt { float X[]; };
// Weight rows per workgroup: each invocation loads its activations once for
// all of them.
#define NR 2u
#define RED (NR * WG)
#elif defined(PROLOGUE)
layout(set = 0, binding = 1, std430) readonly buffer Xt { float XS[]; };
#if defined(PRO_NORM) || defined(PRO_GLU) || defined(EPI_POST_NORM)
layout(set = 0, binding = 3, std430) readonly buffer Aux { float AUX[]; };
#endif
#ifdef PRO_OUT
layout(set = 0, binding = 4, std430) writeonly buffer Po { float PO[]; };
#endif
#if defined(EPI_ADD) || defined(EPI_POST_NORM)
#if defined(PRO_OUT)
#define RES_BINDING 5
#elif defined(PRO_NORM) || defined(PRO_GLU) || defined(EPI_POST_NORM)
#define RES_BINDING 4
#else
#define RES_BINDING 3
#endif
layout(set = 0, binding = RES_BINDING, std430) buffer Rt { float R[]; };
#endif
#ifdef EPI_POST_NORM
// The count of workgroups done (word 0; zero between dispatches).
layout(set = 0, binding = 5, std430) coherent buffer Ct { uint CNT[]; };
shared bool post_last; // this workgroup counted last
#define RMS_WG WG
#define RMS_VAL(a, b, c) O[(a) + (c)]
#include "rms.glsl"
#endif
#ifdef EPI_ROPE
#include "rope.glsl"
#include "kv.glsl"
#include "step.glsl"
#ifdef PRO_OUT
STEP_WORDS(5)
layout(set = 0, binding = 6, std430) writeonly buffer Kv { uint cache[]; };
#else
STEP_WORDS(4)
layout(set = 0, binding = 5, std430) writeonly buffer Kv { uint cache[]; };
#endif
#endif
// The row's values, then its blocks in the dot format (9 words per 32).
// Element c of the row is at row_vals[RV(c)]: one unused word after every
// 32, so that the quantizer's invocations, each reading a run of a block
// (8 or 16 consecutive elements), meet in distinct shared-memory banks
// (unpadded, runs 8 words apart share 4 banks between 32 invocations).
#define MAX_K 3072u
#define RV(c) ((c) + ((c) >> 5))
shared float row_vals[MAX_K + MAX_K / 32u];
// (The larger of Q8_K's 73 words per 256 elements and Q8_0 / Q8_1's 9 per
// 32.)
shared uint SA[MAX_K / 256u * 73u];
#define ACT(ab, t, k) SA[(ab) + (k)]
#define QT 1u
#include "qdot.glsl"
#define QUANT_WG WG
#define QV(i) row_vals[RV(i)]
#define QSTORE(w, v) SA[w] = (v)
#ifdef ACT_Q8_K
#include "quant_row_k.glsl"
#define QUANT_ROW quant_row_k
#else
#include "quant_row.glsl"
#define QUANT_ROW quant_row
#endif
#ifdef PRO_NORM
#define RMS_WG WG
#define RMS_VAL(a, b, c) XS[(a) + (c)]
// The norm's weight into row_vals while the squares are summed.
#define RMS_EXTRA(c) row_vals[RV(c)] = AUX[f.aux_offset + (c)]
#include "rms.glsl"
#endif
#if defined(PRO_GLU) || defined(PAIR_GLU)
#include "glu.glsl"
#endif
#define TPR (WG / ROWS_PER_WG)
#define RED WG
#else
layout(set = 0, binding = 1, std430) readonly buffer At { uint A[]; };
#define QT 1u
#include "qdot.glsl"
#if !defined(ROWS_PER_WG)
#error "matvec.comp: ROWS_PER_WG must be set for block types"
#endif
#define TPR (WG / ROWS_PER_WG)
#define RED WG
#endif

shared float red[RED];
#ifdef KSPLIT
#if (128 / ROWS_PER_WG) % KSPLIT != 0 || 16 % KSPLIT != 0
#error "matvec.comp: KSPLIT must divide TPR and 16"
#endif
// The parts' integer lane sums (qdot_k_part).
shared ivec4 kpart0[WG];
shared ivec4 kpart1[WG];
#endif

#ifdef PROLOGUE
// The activation row into SA: computed (and, with PRO_OUT, written by
// workgroup 0), then quantized. Every invocation calls it (barriers).
void prologue(uint tid, bool first) {
    uint n = p.n_in;
#ifdef PRO_NORM
    precise float scale = rms_scale(f.src_offset, 0u, n, tid, f.eps);
#endif
    for (uint c = tid; c < n; c += WG) {
#if defined(PRO_NORM)
        precise float y = XS[f.src_offset + c] * scale;
        y = y * row_vals[RV(c)]; // the weight, stored there by this invocation
#elif defined(PRO_GLU)
        float a = XS[f.src_offset + c];
        float b = AUX[f.aux_offset + c];
        float y = f.op == GLU_SWIGLU ? swiglu(a, b) : geglu(a, b);
#else
        float y = XS[f.src_offset + c];
#endif
        row_vals[RV(c)] = y;
#ifdef PRO_OUT
        if (first) {
            PO[f.pro_out_offset + c] = y;
        }
#endif
    }
    barrier();
    QUANT_ROW(tid, n, 0u);
    barrier();
}
#endif

void main() {
#ifdef SG_RED
    // Whole subgroups (their sizes sum to the workgroup's) of at least 8
    // (the quantizer's blocks take up to 8 lanes): tid counts subgroup by
    // subgroup, so that a run of lanes within a subgroup is a run of tid.
    sg = gl_SubgroupSize >= 8u && gl_NumSubgroups * gl_SubgroupSize == WG;
    uint tid = sg ? gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID : gl_LocalInvocationID.x;
#else
    uint tid = gl_LocalInvocationID.x;
#endif
    uint wgi = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    // Byte offset of the weight matrix, first element (word) of x, of out.
    uint wb = 0u;
    uint xo = p.x_offset;
    uint oo = p.out_offset + p.col0;
    // The rows of this workgroup's product.
    uint rows_n = p.rows;
#ifdef MULTI
    // Writes the norm: workgroup 0 of the dispatch, when segment 0 asks.
    bool norm_writer = wgi == 0u && (m.seg[2] & 8u) != 0u;
    // The segment, and the workgroup's index within it.
    for (uint k = 0u; k < 2u; k++) {
        uint nwg = (m.seg[4u * seg] + ROWS_PER_WG - 1u) / ROWS_PER_WG;
        if (wgi < nwg) {
            break;
        }
        wgi -= nwg;
        seg++;
    }
    rows_n = m.seg[4u * seg];
    oo = m.seg[4u * seg + 1u];
#endif
#ifdef FLOAT_WEIGHTS
    uint row_stride = p.n_in;
#else
    uint nb = p.n_in / BLOCK_ELEMS;
    uint row_stride = nb * ACT_WORDS;
#endif
#ifdef MATMUL_ID
    uint s = gl_WorkGroupID.z;
    float id = IDS[q.ids_offset + s];
    if (!(id >= float(q.e0) && id < float(q.e0 + q.n_e))) {
        return; // uniform over the workgroup
    }
    wb = (uint(id) - q.e0) * p.rows * p.row_bytes;
    xo += (q.x_per_slot != 0u ? s : s / q.k) * row_stride;
    oo = p.out_offset + s * p.n_out;
#endif
#ifdef FLOAT_WEIGHTS
    uint row0 = wgi * NR;
    if (row0 >= p.rows) {
        return; // the whole workgroup: no barrier is skipped by part of it
    }
    uint nr = min(NR, p.rows - row0);
    float acc[NR];
    for (uint r = 0u; r < NR; r++) {
        acc[r] = 0.0;
    }
    for (uint i = tid; i < p.n_in; i += WG) {
        float x = X[xo + i];
        for (uint r = 0u; r < nr; r++) {
            acc[r] += weight_elem(wb + (row0 + r) * p.row_bytes, i) * x;
        }
    }
    for (uint r = 0u; r < NR; r++) {
        red[r * WG + tid] = acc[r];
    }
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            for (uint r = 0u; r < NR; r++) {
                red[r * WG + tid] += red[r * WG + tid + s];
            }
        }
        barrier();
    }
    if (tid < nr) {
        O[oo + row0 + tid] = red[tid * WG];
    }
#else
#ifdef PAIR_GLU
    uint row0 = wgi * RP;
    if (row0 >= p.rows) {
        return; // the whole workgroup
    }
    uint r = tid / TPR;
    uint lane = tid % TPR;
    uint row = row0 + r % RP;
    use_w2 = r >= RP;
#else
    uint row0 = wgi * ROWS_PER_WG;
    if (row0 >= rows_n) {
        return; // the whole workgroup
    }
    uint r = tid / TPR;
    uint lane = tid % TPR;
    uint row = row0 + r;
#endif
    float acc[1];
    acc[0] = 0.0;
#ifdef PROLOGUE
    // The first word of this invocation's first weight block, loaded now
    // so that the load from memory overlaps the prologue (the block's own
    // reads below then find it in cache); compared with a value the
    // matvec never pushes (units is 0), so the compiler keeps the load.
    uint early = 0u;
#ifdef KSPLIT
    uint first_blk = lane / KSPLIT;
#else
    uint first_blk = lane;
#endif
    if (row < rows_n && first_blk < nb) {
        early = WORD((wb + row * p.row_bytes + first_blk * BLOCK_BYTES) >> 2);
    }
#ifdef MULTI
    prologue(tid, norm_writer);
#else
    prologue(tid, wgi == 0u);
#endif
    xo = 0u; // the blocks in SA
    if (early == 0x7fc0deadu && p.units == 0xffffffffu) {
        acc[0] = 1.0;
    }
#endif
#ifdef KSPLIT
    // Super-blocks in KSPLIT parts of 16 / KSPLIT groups, a part a lane
    // (a block's parts on consecutive lanes of its row): the parts'
    // integer sums are added (exactly) through shared memory by the
    // block's first lane, which then takes its f32 term. Every invocation
    // runs the same rounds (barriers).
    uint units = nb * KSPLIT;
    for (uint u0 = 0u; u0 < units; u0 += TPR) {
        uint u = u0 + lane;
        uint blk = u / KSPLIT;
        uint part = u % KSPLIT;
        bool live = row < rows_n && u < units;
        uint bb = wb + row * p.row_bytes + blk * BLOCK_BYTES;
        uint ab[1];
        ab[0] = xo + blk * ACT_WORDS;
        ivec4 a0[1], a1[1];
        a0[0] = ivec4(0);
        a1[0] = ivec4(0);
        if (live) {
            qdot_k_part(bb, ab, part * (16u / KSPLIT), (part + 1u) * (16u / KSPLIT), a0, a1);
        }
#ifdef SG_RED
        if (sg) {
            // The block's parts are lanes first..first + KSPLIT of one
            // subgroup (KSPLIT divides 8).
            uint first = gl_SubgroupInvocationID - part;
            ivec4 s0 = a0[0], s1 = a1[0];
            for (uint j = 1u; j < KSPLIT; j++) {
                s0 += subgroupShuffle(a0[0], first + j);
                s1 += subgroupShuffle(a1[0], first + j);
            }
            if (live && part == 0u) {
                a0[0] = s0;
                a1[0] = s1;
                qdot_k_finish(bb, ab, a0, a1, acc);
            }
            continue;
        }
#endif
        kpart0[tid] = a0[0];
        kpart1[tid] = a1[0];
        barrier();
        if (live && part == 0u) {
            for (uint j = 1u; j < KSPLIT; j++) {
                a0[0] += kpart0[tid + j];
                a1[0] += kpart1[tid + j];
            }
            qdot_k_finish(bb, ab, a0, a1, acc);
        }
        barrier();
    }
#else
    if (row < rows_n) {
        uint rb = wb + row * p.row_bytes;
        uint ab[1];
        for (uint blk = lane; blk < nb; blk += TPR) {
            ab[0] = xo + blk * ACT_WORDS;
            qdot_block(rb + blk * BLOCK_BYTES, ab, acc);
        }
    }
#endif
#ifdef SG_RED
    if (sg) {
        // The row's lanes are TPR consecutive tid (a run of lanes of one
        // subgroup, or whole subgroups): the tree's steps of strides of a
        // subgroup or more through shared memory, the rest a butterfly.
        float v = acc[0];
        uint sgs = gl_SubgroupSize;
        if (TPR > sgs) {
            red[tid] = v;
            barrier();
            for (uint s = TPR / 2u; s >= sgs; s >>= 1) {
                if (lane < s) {
                    red[tid] += red[tid + s];
                }
                barrier();
            }
            v = red[tid];
        }
        for (uint m = min(TPR, sgs) / 2u; m > 0u; m >>= 1) {
            v += subgroupShuffleXor(v, m);
        }
        // Lane 0 holds the row's sum, as red[tid] after the tree.
        red[tid] = v;
#if defined(EPI_ROPE) || defined(PAIR_GLU)
        barrier(); // the epilogue reads other rows' sums
#endif
    } else
#endif
    {
        red[tid] = acc[0];
        barrier();
        for (uint s = TPR / 2u; s > 0u; s >>= 1) {
            if (lane < s) {
                red[tid] += red[tid + s];
            }
            barrier();
        }
    }
#ifdef PAIR_GLU
    // The gate's row r and the up projection's row r + RP, after the
    // reduction's last barrier.
    if (lane == 0u && r < RP && row < rows_n) {
        float g = red[tid];
        float u = red[tid + RP * TPR];
        O[oo + row] = f.op == GLU_SWIGLU ? swiglu(g, u) : geglu(g, u);
        O2[f.res_offset + p.col0 + row] = u;
    }
#elif defined(EPI_ROPE)
    // The pair (row, row + 1) by the even row's lane 0 (ROWS_PER_WG and the
    // head dim are even: a pair never spans two workgroups or heads).
#ifdef MULTI
    uint flags = m.seg[4u * seg + 2u];
    uint at = m.seg[4u * seg + 3u];
    bool rot = (flags & 1u) != 0u;
    uint kv = (flags >> 1) & 3u;
    uint head_dim = m.head_dim;
    uint pos_at = at & 0xffffu;
    float theta_scale = m.theta_scale;
    float freq_scale = m.freq_scale;
    uint kv_pos_at = at >> 16;
    uint kv_width = flags >> 8;
#define OUT_AT(i, v) if (seg == 0u) { O[i] = v; } else if (seg == 1u) { O2[i] = v; } else { O3[i] = v; }
#define CACHE_AT(i, v) if (seg == 0u) { cache[i] = v; } else if (seg == 1u) { cache2[i] = v; } else { cache3[i] = v; }
#else
    bool rot = e.rope != 0u;
    uint kv = e.kv;
    uint head_dim = e.head_dim;
    uint pos_at = e.pos_at;
    float theta_scale = e.theta_scale;
    float freq_scale = e.freq_scale;
    uint kv_pos_at = e.kv_pos_at;
    uint kv_width = e.kv_width;
#define OUT_AT(i, v) O[i] = v
#define CACHE_AT(i, v) cache[i] = v
#endif
    if (lane == 0u && (r & 1u) == 0u && row + 1u < rows_n) {
        precise float y0 = red[tid];
        precise float y1 = red[tid + TPR];
        uint e0 = p.col0 + row; // the pair's first element in the row
        if (rot) {
            uint i = (e0 % head_dim) / 2u;
            vec2 sc = rope_sincos(step_words[pos_at], i, theta_scale, freq_scale);
            vec2 y = rope_turn(y0, y1, sc);
            y0 = y.x;
            y1 = y.y;
        }
        OUT_AT(oo + row, y0);
        OUT_AT(oo + row + 1u, y1);
        uint cb = step_words[kv_pos_at] * kv_width + e0;
        KV_STORE_PAIR_BY_CODE(kv, CACHE_AT, cb, y0, y1)
    }
#else
    if (lane == 0u && row < p.rows) {
        float v = red[tid];
        O[oo + row] = v;
#ifdef EPI_ADD
        uint ri = f.res_offset + p.col0 + row;
        R[ri] = R[ri] + v;
#endif
    }
#ifdef EPI_POST_NORM
    // The workgroup that counts last takes the RMS norm of the whole
    // output row (one group, weight AUX) in place and adds it to the
    // residual, as rms_norm.comp ADD_TO does: every workgroup's outputs
    // are made visible before its count, and read after the last.
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) {
        uint nwg = (p.rows + ROWS_PER_WG - 1u) / ROWS_PER_WG;
        post_last = atomicAdd(CNT[0], 1u) == nwg - 1u;
    }
    barrier();
    if (post_last) {
        memoryBarrierBuffer();
        precise float scale = rms_scale(oo, 0u, p.rows, tid, f.eps);
        for (uint c = tid; c < p.rows; c += WG) {
            precise float y = O[oo + c] * scale;
            y = y * AUX[c];
            O[oo + c] = y;
            uint ri = f.res_offset + c;
            R[ri] = R[ri] + y;
        }
        if (tid == 0u) {
            CNT[0] = 0u; // for the next dispatch
        }
    }
#endif
#endif
#endif
}
