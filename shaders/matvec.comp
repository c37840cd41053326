#version 450
// Decode matvec: out[col0 + r] = sum_c W[r, c] * x[c] for the one activation row.
// One workgroup per weight row (spilling into y past the x limit): its 128
// invocations walk the row's blocks in units of 8 values (consecutive
// invocations read consecutive units: coalesced), then reduce in shared memory.
// Bindings: 0 = weight chunk (uint words), 1 = x, 2 = out. Push: WeightPush.

#include "weights.glsl"

#define WG 128u
layout(local_size_x = 128, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Wt { uint W[]; };
layout(set = 0, binding = 1, std430) readonly buffer Xt { float X[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Ot { float O[]; };

layout(push_constant) uniform Push { WeightPush p; };

#include "blocks.glsl"

shared float red[WG];

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= p.rows) {
        return; // the whole workgroup: no barrier is skipped by part of it
    }
    uint tid = gl_LocalInvocationID.x;
    uint rb = row * p.row_bytes;
    float acc = 0.0;
#ifdef FLOAT_WEIGHTS
    for (uint i = tid; i < p.n_in; i += WG) {
        acc += weight_elem(rb, i) * X[p.x_offset + i];
    }
#else
    uint n_units = (p.n_in / BLOCK_ELEMS) * UNITS;
    for (uint i = tid; i < n_units; i += WG) {
        uint blk = i / UNITS; // constant power of two: a shift
        vec4 lo, hi;
        uint elo, ehi;
        dequant_unit(rb + blk * BLOCK_BYTES, i % UNITS, lo, hi, elo, ehi);
        uint xa = p.x_offset + blk * BLOCK_ELEMS + elo;
        uint xb = p.x_offset + blk * BLOCK_ELEMS + ehi;
        acc += dot(lo, vec4(X[xa], X[xa + 1u], X[xa + 2u], X[xa + 3u]));
        acc += dot(hi, vec4(X[xb], X[xb + 1u], X[xb + 2u], X[xb + 3u]));
    }
#endif
    red[tid] = acc;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            red[tid] += red[tid + s];
        }
        barrier();
    }
    if (tid == 0u) {
        O[p.out_offset + p.col0 + row] = red[0];
    }
}
