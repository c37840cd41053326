#version 450
// Decode matvec: out[col0 + r] = sum_c W[r, c] * x[c] for the one activation row.
// One workgroup per NR weight rows (spilling into y past the x limit): its 128
// invocations walk the rows' blocks in units of 8 values (consecutive
// invocations read consecutive units: coalesced), each loading the matching
// activations once for the NR rows, then reduce in shared memory.
// Bindings: 0 = weight chunk (uint words), 1 = x, 2 = out. Push: WeightPush.
// MATMUL_ID (ggml mul_mat_id, decode): workgroup z is a (token, slot) pair,
// the expert read from binding 3 (ids); the chunk's other experts' pairs
// leave at once. Push: WeightPush, IdPush.

#include "weights.glsl"

#define WG 128u
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

// Weight rows per workgroup: each invocation loads its activations once for
// all of them.
#define NR 2u

shared float red[NR * WG];

void main() {
    uint row0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * NR;
    if (row0 >= p.rows) {
        return; // the whole workgroup: no barrier is skipped by part of it
    }
    uint nr = min(NR, p.rows - row0);
    uint tid = gl_LocalInvocationID.x;
    // Byte offset of the weight matrix, first element of x, of out.
    uint wb = 0u;
    uint xo = p.x_offset;
    uint oo = p.out_offset + p.col0;
#ifdef MATMUL_ID
    uint s = gl_WorkGroupID.z;
    float id = IDS[q.ids_offset + s];
    if (!(id >= float(q.e0) && id < float(q.e0 + q.n_e))) {
        return; // uniform over the workgroup
    }
    wb = (uint(id) - q.e0) * p.rows * p.row_bytes;
    xo += (q.x_per_slot != 0u ? s : s / q.k) * p.n_in;
    oo = p.out_offset + s * p.n_out;
#endif
    float acc[NR];
    for (uint r = 0u; r < NR; r++) {
        acc[r] = 0.0;
    }
#ifdef FLOAT_WEIGHTS
    for (uint i = tid; i < p.n_in; i += WG) {
        float x = X[xo + i];
        for (uint r = 0u; r < nr; r++) {
            acc[r] += weight_elem(wb + (row0 + r) * p.row_bytes, i) * x;
        }
    }
#else
    uint n_units = (p.n_in / BLOCK_ELEMS) * UNITS;
    for (uint i = tid; i < n_units; i += WG) {
        uint blk = i / UNITS; // constant power of two: a shift
        uint u = i % UNITS;
        // The positions of a unit's values do not depend on the row.
        vec4 lo, hi;
        uint elo, ehi;
        dequant_unit(wb + row0 * p.row_bytes + blk * BLOCK_BYTES, u, lo, hi, elo, ehi);
        uint xa = xo + blk * BLOCK_ELEMS + elo;
        uint xb = xo + blk * BLOCK_ELEMS + ehi;
        vec4 x0 = vec4(X[xa], X[xa + 1u], X[xa + 2u], X[xa + 3u]);
        vec4 x1 = vec4(X[xb], X[xb + 1u], X[xb + 2u], X[xb + 3u]);
        acc[0] += dot(lo, x0) + dot(hi, x1);
        for (uint r = 1u; r < nr; r++) {
            dequant_unit(wb + (row0 + r) * p.row_bytes + blk * BLOCK_BYTES, u, lo, hi, elo, ehi);
            acc[r] += dot(lo, x0) + dot(hi, x1);
        }
    }
#endif
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
}
