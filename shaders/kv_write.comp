#version 450
// KV cache write: `rows` rows of K (or V) from an f32 activation into the
// cache at the position the step words hold (KvWritePush). f32 cache: one
// invocation per element, a plain copy. f16 cache (KV_F16): rounded to
// nearest even; one invocation owns one 32-bit word (two halves), so no two
// invocations write the same word; a half of the first or last word that
// lies outside the written range keeps its old value.
// Bindings: 0 = src f32 (read), 1 = cache (read-write), 2 = step words
// (read). Push: KvWritePush.

#include "attention.glsl"
#include "index.glsl"
#include "step.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Src { float src[]; };
#ifdef KV_F16
layout(set = 0, binding = 1, std430) buffer Dst { uint dst[]; };
#else
layout(set = 0, binding = 1, std430) writeonly buffer Dst { float dst[]; };
#endif
STEP_WORDS(2)

layout(push_constant) uniform Push { KvWritePush p; };

void main() {
    uint i = global_index_1d();
    uint n = p.rows * p.width;
    uint e0 = step_words[p.pos_at] * p.width;
#ifdef KV_F16
    uint e1 = e0 + n;
    uint w = e0 / 2u + i;
    uint e = 2u * w;
    bool lo_in = e >= e0 && e < e1;
    bool hi_in = e + 1u >= e0 && e + 1u < e1;
    if (!lo_in && !hi_in) {
        return;
    }
    uint old = (lo_in && hi_in) ? 0u : dst[w];
    uint lo = lo_in ? f32_to_f16_rne(src[p.src_offset + (e - e0)]) : (old & 0xffffu);
    uint hi = hi_in ? f32_to_f16_rne(src[p.src_offset + (e + 1u - e0)]) : (old >> 16);
    dst[w] = lo | (hi << 16);
#else
    if (i >= n) {
        return;
    }
    dst[e0 + i] = src[p.src_offset + i];
#endif
}
