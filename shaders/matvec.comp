#version 450
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
// memory.

#include "weights.glsl"

#define WG 128u
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
// Weight rows per workgroup: each invocation loads its activations once for
// all of them.
#define NR 2u
#define RED (NR * WG)
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

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint wgi = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    // Byte offset of the weight matrix, first element (word) of x, of out.
    uint wb = 0u;
    uint xo = p.x_offset;
    uint oo = p.out_offset + p.col0;
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
    uint row0 = wgi * ROWS_PER_WG;
    if (row0 >= p.rows) {
        return; // the whole workgroup
    }
    uint r = tid / TPR;
    uint lane = tid % TPR;
    uint row = row0 + r;
    float acc[1];
    acc[0] = 0.0;
    if (row < p.rows) {
        uint rb = wb + row * p.row_bytes;
        uint ab[1];
        for (uint blk = lane; blk < nb; blk += TPR) {
            ab[0] = xo + blk * ACT_WORDS;
            qdot_block(rb + blk * BLOCK_BYTES, ab, acc);
        }
    }
    red[tid] = acc[0];
    barrier();
    for (uint s = TPR / 2u; s > 0u; s >>= 1) {
        if (lane < s) {
            red[tid] += red[tid + s];
        }
        barrier();
    }
    if (lane == 0u && row < p.rows) {
        O[oo + row] = red[tid];
    }
#endif
}
