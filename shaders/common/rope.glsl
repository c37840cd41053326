// RoPE's arithmetic, as engine/src/cpu/rope.rs computes it, for every
// shader that rotates (rope.comp, matvec.comp's EPI_ROPE, norm_rope.comp):
// pair i at position pos turns by freq_scale * theta_i, theta_0 = pos,
// theta_{i+1} = theta_i * theta_scale in f32 (theta_scale = base^(-2/n_rot),
// computed on the host with the CPU's powf), cos/sin by sincos_accurate
// (the drivers' own sin/cos are not accurate at large angles); a NORM pair
// is the adjacent (2i, 2i + 1), a NEOX pair (i, i + n_rot / 2).
#ifndef SHARPI_ROPE_GLSL
#define SHARPI_ROPE_GLSL

#include "math.glsl"

// (sin, cos) of pair i's angle at position pos.
vec2 rope_sincos(uint pos, uint i, float theta_scale, float freq_scale) {
    precise float theta = float(pos);
    for (uint k = 0u; k < i; k++) {
        theta = theta * theta_scale;
    }
    precise float th = freq_scale * theta;
    return sincos_accurate(th);
}

// Pair i's two elements in its head: NORM (2i, 2i + 1), NEOX (i, i +
// half_rot).
uvec2 rope_pair(uint i, uint half_rot, bool neox) {
    return neox ? uvec2(i, i + half_rot) : uvec2(2u * i, 2u * i + 1u);
}

// The pair (x0, x1) turned by the angle whose (sin, cos) is sc.
vec2 rope_turn(float x0, float x1, vec2 sc) {
    precise float r0 = x0 * sc.y - x1 * sc.x;
    precise float r1 = x0 * sc.x + x1 * sc.y;
    return vec2(r0, r1);
}

// Pairs i0 and i0 + 1 (i0 even; elements a0, b0 and a1, b1 with values y)
// into an f16 cache row starting at element cb: the two 32-bit words they
// fill, low half first (NORM (a0, b0), (a1, b1); NEOX (a0, a1), (b0, b1)),
// so no two invocations write one word. `at`: the words' indices.
uvec2 rope_f16_words(uint cb, uvec2 pair0, uvec2 pair1, vec4 y, bool neox, out uvec2 at) {
    uint h00 = f32_to_f16_rne(y.x);
    uint h01 = f32_to_f16_rne(y.y);
    uint h10 = f32_to_f16_rne(y.z);
    uint h11 = f32_to_f16_rne(y.w);
    if (neox) {
        at = uvec2((cb + pair0.x) / 2u, (cb + pair0.y) / 2u);
        return uvec2(h00 | (h10 << 16), h01 | (h11 << 16));
    }
    at = uvec2((cb + pair0.x) / 2u, (cb + pair1.x) / 2u);
    return uvec2(h00 | (h01 << 16), h10 | (h11 << 16));
}

#endif
