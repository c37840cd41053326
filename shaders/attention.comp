#version 450
// Causal grouped-query attention of T query rows against the KV cache (which
// already holds this batch's K and V rows), one workgroup per (head, row),
// or per (head, RB consecutive rows) in the ROWS variants (RB defined): the
// rows share each tile's staged keys and loaded values, and each row's
// arithmetic is the one-row kernel's, tile by tile; tiles start at the
// first row's first visible position, so with a sliding window that cuts
// the later rows off further, their tiles are cut elsewhere (the same
// softmax, other roundings).
//
// The workgroup walks the visible positions first..pos in tiles of WG keys:
// each invocation scores one key (q . k, scaled, soft-capped), the tile's max
// and sum come from shared-memory reductions, and an online softmax rescales
// the running output: invocation i accumulates output dimensions i, i + WG,
// ... (at most ACC of them) over the tile's keys from shared memory.
//
// Variants: KV_F16 (cache words hold two halves, low first) or f32 cache.
// SPLIT (split-K, for decode at long context): workgroup z = s of n_split
// takes the s-th of n_split equal runs of the visible positions and writes
// its running max, sum and unnormalised output (m, l, acc[head_dim_v]) as
// f32 bits to binding 3 (the partials buffer) at word
// ((t * n_head + h) * n_split + s) * (head_dim_v + 2), then counts itself
// done on the (row, head)'s counter, word cnt_at + t * n_head + h of the
// same buffer (zero between dispatches). The run that counts last weighs
// the n_split partials together as the online softmax does across tiles
// (M = max m_s, w_s = exp(m_s - M), 0 for an empty run, m_s = -inf;
// out = (sum w_s acc_s) * (1 / sum w_s l_s)), writes out (binding 5) and
// puts the counter back to zero: the partials are written and made visible
// (coherent, memoryBarrierBuffer) before the count, and read after it, so
// no second dispatch and no barrier between the two passes. An empty run
// writes m = MAX_START, l = 0, acc = 0.
// Bindings: 0 = q (read), 1 = K cache (read), 2 = V cache (read),
// 3 = out (written; SPLIT: the partials and counters), 4 = step words
// (read: the first row's position), SPLIT: 5 = out (written).
// Push: AttnPush (SPLIT: then n_split and cnt_at).
// The dot products and sums are `precise`: a driver that fuses a multiply
// and an add into one fma (NVIDIA's does) rounds differently from the CPU.
// Limits (checked on the host): head_dim_k <= MAX_DK, head_dim_v <= WG * ACC.

#include "attention.glsl"
#include "step.glsl"

#define WG 64
#define ACC 8
#define MAX_DK 512
// Cache elements loaded at once before they are summed.
#define LOADS 16u
#define NEG_INF uintBitsToFloat(0xff800000u)
// Query rows per workgroup (ROWS variants: RB rows share each tile's keys
// and values; 1 otherwise).
#ifndef RB
#define RB 1
#endif
#if defined(SPLIT) && RB != 1
#error "attention.comp: SPLIT takes one row per workgroup"
#endif

layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Q { float q[]; };
#ifdef KV_F16
layout(set = 0, binding = 1, std430) readonly buffer K { uint kc[]; };
layout(set = 0, binding = 2, std430) readonly buffer V { uint vc[]; };
#else
layout(set = 0, binding = 1, std430) readonly buffer K { float kc[]; };
layout(set = 0, binding = 2, std430) readonly buffer V { float vc[]; };
#endif
#ifdef SPLIT
layout(set = 0, binding = 3, std430) coherent buffer Part { uint part[]; };
layout(set = 0, binding = 5, std430) writeonly buffer Out { float o[]; };
#else
layout(set = 0, binding = 3, std430) writeonly buffer Out { float o[]; };
#endif
STEP_WORDS(4)

#ifdef SPLIT
layout(push_constant) uniform Push {
    AttnPush p;
    uint n_split;
    uint cnt_at;
};
shared bool last_run; // this workgroup counted last for its (row, head)
#else
layout(push_constant) uniform Push { AttnPush p; };
#endif

shared float sq[RB * MAX_DK]; // the rows' queries, row r at r * head_dim_k
// A tile's keys, KC dimensions of each (a row of KC + 1: no two keys'
// same dimension in one bank).
#define KC 32u
shared float sk[WG * (KC + 1u)];
shared float sp[RB * WG];  // the tile's probabilities, row r at r * WG
shared float red[RB * WG]; // reduction scratch, the same layout

#ifdef KV_F16
float v_at(uint e) {
    vec2 h = unpackHalf2x16(vc[e >> 1]);
    return (e & 1u) == 0u ? h.x : h.y;
}

float k_at(uint e) {
    vec2 h = unpackHalf2x16(kc[e >> 1]);
    return (e & 1u) == 0u ? h.x : h.y;
}
#else
float v_at(uint e) {
    return vc[e];
}

float k_at(uint e) {
    return kc[e];
}
#endif

// The first position a query at `pos` sees.
uint first_seen(uint pos) {
    return (p.window == 0u || pos + 1u <= p.window) ? 0u : pos + 1u - p.window;
}

// The scores of a tile's keys j0 .. j0 + n: invocation tid < n gets
// q_r . K[j0 + tid] in dots[r] for each row r, summed over the dimensions
// in order as the CPU does.
// Many rows (prefill): the tile's keys are staged into shared memory KC
// dimensions at a time, each load by consecutive invocations from one
// key's consecutive elements (a key per invocation reads WG rows at once,
// a few bytes of each: on the H200 half the prefill time at depth 2048),
// and every staged element serves the RB rows.
void tile_dots(uint j0, uint n, uint kbase, uint tid, out float dots[RB]) {
    uint dk = p.head_dim_k;
#ifdef SPLIT
    // Decode: a run of a tile or two per workgroup, latency-bound: each
    // invocation reads its own key, LOADS elements in flight at once (the
    // same sum).
    precise float s = 0.0;
    if (tid < n) {
        uint base = (j0 + tid) * p.k_width + kbase;
        uint i = 0u;
        for (; i + LOADS <= dk; i += LOADS) {
            float kv[LOADS];
            for (uint u = 0u; u < LOADS; u++) {
                kv[u] = k_at(base + i + u);
            }
            for (uint u = 0u; u < LOADS; u++) {
                s += sq[i + u] * kv[u];
            }
        }
        for (; i < dk; i++) {
            s += sq[i] * k_at(base + i);
        }
    }
    dots[0] = s;
#else
    precise float s[RB];
    for (uint r = 0u; r < uint(RB); r++) {
        s[r] = 0.0;
    }
    for (uint c0 = 0u; c0 < dk; c0 += KC) {
        uint w = min(KC, dk - c0);
        for (uint i = tid; i < WG * KC; i += WG) {
            uint key = i / KC;
            uint e = i % KC;
            if (key < n && e < w) {
                sk[key * (KC + 1u) + e] = k_at((j0 + key) * p.k_width + kbase + c0 + e);
            }
        }
        barrier();
        if (tid < n) {
            for (uint u = 0u; u < w; u++) {
                float kv = sk[tid * (KC + 1u) + u];
                for (uint r = 0u; r < uint(RB); r++) {
                    s[r] += sq[r * dk + c0 + u] * kv;
                }
            }
        }
        barrier();
    }
    for (uint r = 0u; r < uint(RB); r++) {
        dots[r] = s[r];
    }
#endif
}

void main() {
    uint h = gl_WorkGroupID.x;
    // Rows t0 .. t0 + nr, row r at position pos0 + r.
    uint t0 = gl_WorkGroupID.y * uint(RB);
    uint nr = min(uint(RB), p.n_rows - t0);
    uint tid = gl_LocalInvocationID.x;
    uint g = h / p.group;
    uint pos0 = step_words[p.pos_at] + t0;
    uint dk = p.head_dim_k;
    uint dv = p.head_dim_v;

    for (uint r = 0u; r < nr; r++) {
        uint qbase = p.q_offset + ((t0 + r) * p.n_head + h) * dk;
        for (uint i = tid; i < dk; i += WG) {
            sq[r * dk + i] = Q_IN(q[qbase + i]);
        }
    }
    barrier();

    float m[RB];         // running max
    precise float l[RB]; // running sum of exp(s - m)
    float acc[RB * ACC]; // row r's output dimension tid + a * WG at r * ACC + a
    for (uint r = 0u; r < uint(RB); r++) {
        m[r] = MAX_START;
        l[r] = 0.0;
        for (uint a = 0u; a < ACC; a++) {
            acc[r * ACC + a] = 0.0;
        }
    }
    uint kbase = g * dk;
    uint vbase = g * dv;

    // Keys lo..hi: every one a row sees, or this workgroup's run of them.
    // Each row weighs only its own (first_seen(pos)..pos); a tile with none
    // of them leaves the row as it was.
    uint lo = first_seen(pos0);
    uint hi = pos0 + nr;
#ifdef SPLIT
    uint chunk = (hi - lo + n_split - 1u) / n_split;
    lo = min(lo + gl_WorkGroupID.z * chunk, hi);
    hi = min(lo + chunk, hi);
#endif
    for (uint j0 = lo; j0 < hi; j0 += WG) {
        uint n = min(uint(WG), hi - j0);
        float dots[RB];
        tile_dots(j0, n, kbase, tid, dots);
        // Row r's keys of the tile: indices ka[r] .. kb[r].
        uint ka[RB], kb[RB];
        float s[RB];
        for (uint r = 0u; r < uint(RB); r++) {
            uint f = first_seen(pos0 + r);
            ka[r] = f > j0 ? min(f - j0, n) : 0u;
            kb[r] = r < nr && pos0 + r + 1u > j0 ? min(n, pos0 + r + 1u - j0) : 0u;
            s[r] = NEG_INF;
            if (tid >= ka[r] && tid < kb[r]) {
                s[r] = p.scale * dots[r];
                if (p.softcap > 0.0) {
                    s[r] = p.softcap * tanh_accurate(s[r] / p.softcap);
                }
            }
            // Tile max.
            red[r * WG + tid] = s[r];
        }
        barrier();
        for (uint w = WG / 2; w > 0u; w >>= 1) {
            if (tid < w) {
                for (uint r = 0u; r < uint(RB); r++) {
                    red[r * WG + tid] = max(red[r * WG + tid], red[r * WG + tid + w]);
                }
            }
            barrier();
        }
        float m_new[RB], alpha[RB], e[RB];
        for (uint r = 0u; r < uint(RB); r++) {
            m_new[r] = RUNNING_MAX(max(m[r], red[r * WG]));
            alpha[r] = m[r] == NEG_INF ? 0.0 : exp(m[r] - m_new[r]);
            // A score of -inf weighs 0 (exp(-inf - -inf) would be NaN while
            // every score so far is -inf).
            e[r] = s[r] != NEG_INF ? exp(s[r] - m_new[r]) : 0.0;
            sp[r * WG + tid] = e[r];
        }
        barrier();
        // Tile sum.
        for (uint r = 0u; r < uint(RB); r++) {
            red[r * WG + tid] = e[r];
        }
        barrier();
        for (uint w = WG / 2; w > 0u; w >>= 1) {
            if (tid < w) {
                for (uint r = 0u; r < uint(RB); r++) {
                    red[r * WG + tid] += red[r * WG + tid + w];
                }
            }
            barrier();
        }
        // Whether tile key j is row r's.
#define SEEN(r, j) ((j) - ka[r] < kb[r] - ka[r])
        bool live[RB];
        for (uint r = 0u; r < uint(RB); r++) {
            live[r] = ka[r] < kb[r];
            if (live[r]) {
                l[r] = l[r] * alpha[r] + red[r * WG];
                m[r] = m_new[r];
            }
        }
        for (uint a = 0u; a < ACC; a++) {
            uint d = tid + a * WG;
            if (d < dv) {
                precise float x[RB];
                for (uint r = 0u; r < uint(RB); r++) {
                    x[r] = acc[r * ACC + a] * alpha[r];
                }
                uint row = j0 * p.v_width + vbase + d;
                uint jj = 0u;
                // LOADS keys' values in flight together, then summed in
                // order; a row's keys outside ka..kb add +0 (x + 0 is x:
                // x, a sum from +0, is never -0), not 0 * v (NaN for a
                // masked v of inf or NaN).
                for (; jj + LOADS <= n; jj += LOADS) {
                    float vv[LOADS];
                    for (uint u = 0u; u < LOADS; u++) {
                        vv[u] = v_at(row + u * p.v_width);
                    }
                    for (uint u = 0u; u < LOADS; u++) {
                        for (uint r = 0u; r < uint(RB); r++) {
                            x[r] += SEEN(r, jj + u) ? sp[r * WG + jj + u] * vv[u] : 0.0;
                        }
                    }
                    row += LOADS * p.v_width;
                }
                for (; jj < n; jj++) {
                    float vv = v_at(row);
                    for (uint r = 0u; r < uint(RB); r++) {
                        x[r] += SEEN(r, jj) ? sp[r * WG + jj] * vv : 0.0;
                    }
                    row += p.v_width;
                }
                for (uint r = 0u; r < uint(RB); r++) {
                    if (live[r]) {
                        acc[r * ACC + a] = x[r];
                    }
                }
            }
        }
        barrier(); // before the next tile overwrites sp and red
    }

#ifdef SPLIT
    uint t = t0;
    float m0 = m[0];
    float l0 = l[0];
    uint stride = dv + 2u;
    uint base = (t * p.n_head + h) * n_split * stride;
    uint pb = base + gl_WorkGroupID.z * stride;
    if (tid == 0u) {
        part[pb] = floatBitsToUint(m0);
        part[pb + 1u] = floatBitsToUint(l0);
    }
    for (uint a = 0u; a < ACC; a++) {
        uint d = tid + a * WG;
        if (d < dv) {
            part[pb + 2u + d] = floatBitsToUint(acc[a]);
        }
    }
    // Every invocation's partials visible on the device, then the count.
    memoryBarrierBuffer();
    barrier();
    uint cnt = cnt_at + t * p.n_head + h;
    if (tid == 0u) {
        last_run = atomicAdd(part[cnt], 1u) == n_split - 1u;
    }
    barrier();
    if (!last_run) {
        return; // the whole workgroup (no barrier follows)
    }
    memoryBarrierBuffer(); // the other runs' partials, counted before ours
    float mx = NEG_INF;
    for (uint s = 0u; s < n_split; s++) {
        mx = max(mx, uintBitsToFloat(part[base + s * stride]));
    }
    precise float lsum = 0.0;
    for (uint s = 0u; s < n_split; s++) {
        float ms = uintBitsToFloat(part[base + s * stride]);
        float w = ms == NEG_INF ? 0.0 : exp(ms - mx);
        lsum += w * uintBitsToFloat(part[base + s * stride + 1u]);
    }
    float inv = 1.0 / lsum;
    uint obase = p.out_offset + (t * p.n_head + h) * dv;
    for (uint d = tid; d < dv; d += WG) {
        precise float x = 0.0;
        for (uint s = 0u; s < n_split; s++) {
            float ms = uintBitsToFloat(part[base + s * stride]);
            float w = ms == NEG_INF ? 0.0 : exp(ms - mx);
            x += w * uintBitsToFloat(part[base + s * stride + 2u + d]);
        }
        o[obase + d] = x * inv;
    }
    if (tid == 0u) {
        part[cnt] = 0u; // for the next dispatch
    }
#else
    for (uint r = 0u; r < nr; r++) {
        float inv = 1.0 / l[r];
        uint obase = p.out_offset + ((t0 + r) * p.n_head + h) * dv;
        for (uint a = 0u; a < ACC; a++) {
            uint d = tid + a * WG;
            if (d < dv) {
                o[obase + d] = acc[r * ACC + a] * inv;
            }
        }
    }
#endif
}
