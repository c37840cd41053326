#version 450
// The second pass of split-K attention (attention.comp SPLIT): for each
// (head h = x, row t = y), the n_split runs' partials (m_s, l_s, acc_s)
// weighed together as the online softmax does across tiles:
// M = max m_s, w_s = exp(m_s - M) (0 for an empty run, m_s = -inf),
// out = (sum w_s acc_s) * (1 / sum w_s l_s). One invocation per output
// dimension (strided). Bindings: 0 = partials (read), 1 = out (written).
// Push: AttnCombinePush.

#include "attention.glsl"

#define WG 64
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Part { float part[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Out { float o[]; };

layout(push_constant) uniform Push { AttnCombinePush p; };

void main() {
    uint h = gl_WorkGroupID.x;
    uint t = gl_WorkGroupID.y;
    uint dv = p.head_dim_v;
    uint stride = dv + 2u;
    uint base = (t * p.n_head + h) * p.n_split * stride;
    float mx = NEG_INF;
    for (uint s = 0u; s < p.n_split; s++) {
        mx = max(mx, part[base + s * stride]);
    }
    precise float l = 0.0;
    for (uint s = 0u; s < p.n_split; s++) {
        float m = part[base + s * stride];
        float w = m == NEG_INF ? 0.0 : exp(m - mx);
        l += w * part[base + s * stride + 1u];
    }
    float inv = 1.0 / l;
    uint obase = p.out_offset + (t * p.n_head + h) * dv;
    for (uint d = gl_LocalInvocationID.x; d < dv; d += WG) {
        precise float x = 0.0;
        for (uint s = 0u; s < p.n_split; s++) {
            float m = part[base + s * stride];
            float w = m == NEG_INF ? 0.0 : exp(m - mx);
            x += w * part[base + s * stride + 2u + d];
        }
        o[obase + d] = x * inv;
    }
}
