#version 450
// RoPE in place (NORM: adjacent pairs (2i, 2i+1); NEOX: halves (i, i + n_rot/2)),
// as engine/src/cpu/rope.rs computes it: theta_0 = p, theta_{i+1} = theta_i *
// theta_scale in f32 (theta_scale = base^(-2/n_rot), computed on the host with
// the CPU's powf), then cos/sin of freq_scale * theta_i (sincos_accurate: the
// drivers' own sin/cos are not accurate at large angles). One invocation per
// (row, pair i), looping over the row's heads; elements past n_rot are not
// touched.
// Bindings: 0 = x (read and written), 1 = step words (read: the position).
// Push: RopePush.

#include "elementwise.glsl"
#include "math.glsl"
#include "index.glsl"
#include "step.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer X { float x[]; };
STEP_WORDS(1)

layout(push_constant) uniform Push { RopePush p; };

void main() {
    uint id = global_index_1d();
    if (id >= p.rows * p.half_rot) {
        return;
    }
    uint t = id / p.half_rot;
    uint i = id % p.half_rot;

    precise float theta = float(step_words[p.pos_at] + t);
    for (uint k = 0; k < i; k++) {
        theta = theta * p.theta_scale;
    }
    precise float th = p.freq_scale * theta;
    vec2 sc = sincos_accurate(th);
    float c = sc.y;
    float s = sc.x;

    uint ia = p.neox != 0 ? i : 2 * i;
    uint ib = p.neox != 0 ? i + p.half_rot : 2 * i + 1;
    uint row = p.offset + t * p.width;
    for (uint h = row; h < row + p.width; h += p.head_dim) {
        float x0 = x[h + ia];
        float x1 = x[h + ib];
        precise float y0 = x0 * c - x1 * s;
        precise float y1 = x0 * s + x1 * c;
        x[h + ia] = y0;
        x[h + ib] = y1;
    }
}
