#version 450
// KV cache write: `rows` rows of K (or V) from an f32 activation into the
// cache at the position the step words hold (KvWritePush), as kv.glsl's
// KV_WRITE_RANGE stores the cache's element type. f32 cache: one
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
layout(set = 0, binding = 1, std430) KV_DST_ACCESS buffer Dst { KV_WORD dst[]; };
STEP_WORDS(2)

layout(push_constant) uniform Push { KvWritePush p; };

void main() {
    uint i = global_index_1d();
    uint n = p.rows * p.width;
    uint e0 = step_words[p.pos_at] * p.width;
    KV_WRITE_RANGE(dst, src, p.src_offset, e0, n, i)
}
