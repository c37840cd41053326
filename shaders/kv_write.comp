#version 450
// KV cache write for an f16 cache: rows of K (or V) from an f32 activation into
// the cache, rounded to nearest even. One invocation owns one 32-bit word (two
// halves), so no two invocations write the same word; a half of the first or
// last word that lies outside the written range keeps its old value.
// Bindings: 0 = src f32 (read), 1 = cache words (read-write). Push: KvWritePush.

#include "attention.glsl"
#include "index.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Src { float src[]; };
layout(set = 0, binding = 1, std430) buffer Dst { uint dst[]; };

layout(push_constant) uniform Push { KvWritePush p; };

void main() {
    uint i = global_index_1d();
    if (i >= p.n_words) {
        return;
    }
    uint w = p.e0 / 2u + i;
    uint e = 2u * w;
    bool lo_in = e >= p.e0 && e < p.e1;
    bool hi_in = e + 1u >= p.e0 && e + 1u < p.e1;
    uint old = (lo_in && hi_in) ? 0u : dst[w];
    uint lo = lo_in ? f32_to_f16_rne(src[p.src_offset + (e - p.e0)]) : (old & 0xffffu);
    uint hi = hi_in ? f32_to_f16_rne(src[p.src_offset + (e + 1u - p.e0)]) : (old >> 16);
    dst[w] = lo | (hi << 16);
}
