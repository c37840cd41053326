#version 450
// Embedding lookup: out[t] = dequantized row ids[t] of the table, for the
// tokens whose row lies in this chunk (rows col0..col0 + rows). One
// invocation per (token, unit of 8 values) (per element for float types).
// Bindings: 0 = weight chunk (uint words), 1 = token ids (uint), 2 = out.
// Push: WeightPush (x_offset: first id; units: invocations per token).

#include "weights.glsl"
#include "index.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Wt { uint W[]; };
layout(set = 0, binding = 1, std430) readonly buffer Ids { uint ids[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Ot { float O[]; };

layout(push_constant) uniform Push { WeightPush p; };

#include "blocks.glsl"

void main() {
    uint i = global_index_1d();
    if (i >= p.n_tok * p.units) {
        return;
    }
    uint t = i / p.units;
    uint j = i - t * p.units;
    uint id = ids[p.x_offset + t];
    if (id < p.col0 || id - p.col0 >= p.rows) {
        return; // another chunk's row
    }
    uint rb = (id - p.col0) * p.row_bytes;
    uint o = p.out_offset + t * p.n_in;
#ifdef FLOAT_WEIGHTS
    O[o + j] = weight_elem(rb, j);
#else
    uint blk = j / UNITS;
    vec4 lo, hi;
    uint elo, ehi;
    dequant_unit(rb + blk * BLOCK_BYTES, j % UNITS, lo, hi, elo, ehi);
    uint a = o + blk * BLOCK_ELEMS + elo;
    uint b = o + blk * BLOCK_ELEMS + ehi;
    O[a] = lo.x;
    O[a + 1u] = lo.y;
    O[a + 2u] = lo.z;
    O[a + 3u] = lo.w;
    O[b] = hi.x;
    O[b + 1u] = hi.y;
    O[b + 2u] = hi.z;
    O[b + 3u] = hi.w;
#endif
}
