#version 450
// The runs of keys of `attention_coop.comp` SPLIT weighed together: one
// invocation per output element (batch row t, head h, dimension d). Over
// the runs s: M = max m_s; w_s = exp(m_s - M) (0 for a run that saw no
// key, m_s = -inf); out = (sum_s w_s O_s[d]) * (1 / sum_s w_s l_s), the
// runs in order. A row that saw no finite score has l = 0 everywhere:
// 0 * (1 / 0) = NaN, as the one-run kernel gives.
// Bindings: 0 = partials (read: O [S, T, n_head, dv] from word 0, (m, l)
// [S, T, n_head, 2] from ml_at), 1 = out (written: [T, n_head * dv] from
// out_offset). Push: CombinePush.

#include "index.glsl"

#define NEG_INF uintBitsToFloat(0xff800000u)

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Part { float part[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Out { float o[]; };

layout(push_constant) uniform Push {
    uint n_rows;     // T
    uint n_head;
    uint head_dim_v;
    uint n_split;    // S
    uint out_offset;
    uint ml_at;
} p;

void main() {
    uint i = global_index_1d();
    uint rows = p.n_rows * p.n_head; // (t, h) pairs
    if (i >= rows * p.head_dim_v) {
        return;
    }
    uint th = i / p.head_dim_v;
    uint d = i % p.head_dim_v;
    float mx = NEG_INF;
    for (uint s = 0u; s < p.n_split; s++) {
        mx = max(mx, part[p.ml_at + 2u * (s * rows + th)]);
    }
    float l = 0.0;
    float acc = 0.0;
    for (uint s = 0u; s < p.n_split; s++) {
        uint at = s * rows + th;
        float m = part[p.ml_at + 2u * at];
        float w = m == NEG_INF ? 0.0 : exp(m - mx);
        l += part[p.ml_at + 2u * at + 1u] * w;
        acc += part[at * p.head_dim_v + d] * w;
    }
    o[p.out_offset + i] = acc * (1.0 / l);
}
