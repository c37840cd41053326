#version 450
// Causal grouped-query attention of T query rows against the KV cache (which
// already holds this batch's K and V rows), one workgroup per (head, row):
// decode, and batches whose head dims attention_rows.comp (many rows a
// workgroup, the same arithmetic per row) does not take.
//
// The workgroup walks the visible positions first..pos in tiles of WG keys:
// each invocation scores one key (q . k, scaled, soft-capped), the tile's max
// and sum come from shared-memory reductions, and an online softmax rescales
// the running output: invocation i accumulates output dimensions i, i + WG,
// ... (at most ACC of them) over the tile's keys from shared memory.
//
// Variants: the cache's element type (kv.glsl: f32 or KV_F16).
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
// OUT_PROJ (decode, one row; op_attention_oproj.rs): the output
// projection that follows and its residual add, in the same dispatch. The
// workgroup that writes a head's output (with SPLIT: the head's last run)
// also quantizes it (its head_dim_v / 32 blocks, as the projection's
// prologue quantizes the row: a block's bytes do not depend on its
// neighbours) and writes those blocks' terms of every row of the
// projection (of its weight type) to the partials at [block][row]; the
// head that counts itself done last on the counter's word 0 (and puts it
// back to zero) sums each row's terms in the order matvec.comp's 16 lanes
// and tree add them (PRO_QUANT + EPI_ADD), writes the row and adds it to
// the residual: the bits of that dispatch, one dependent stage fewer.
// Bindings after the attention's (5, SPLIT: 6 on): the projection's
// weight, its output, the residual, the partials, the counter. Push: then
// OprojPush.
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
layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1, std430) readonly buffer K { KV_WORD kc[]; };
layout(set = 0, binding = 2, std430) readonly buffer V { KV_WORD vc[]; };
// The K cache again, 16 bytes (KVEC elements) a read.
layout(set = 0, binding = 1, std430) readonly buffer K4 { KV_VEC kc4[]; };
// Key elements in flight at once. (Measured on the H200,
// Gemma-3-270M tg128 at depth 2048: the values' loop below with each
// invocation's dimensions together, 8 or 16 keys' values of each in
// flight, ran 2-12% slower than one dimension after another.)
#define RUN_K 64u
#ifdef SPLIT
layout(set = 0, binding = 3, std430) coherent buffer Part { uint part[]; };
layout(set = 0, binding = 5, std430) writeonly buffer Out { float o[]; };
#else
layout(set = 0, binding = 3, std430) writeonly buffer Out { float o[]; };
#endif
STEP_WORDS(4)

#ifdef OUT_PROJ
// The output projection: its weight's row bytes and rows, the element
// offsets of its output and of the residual.
struct OprojPush {
    uint row_bytes;
    uint rows;
    uint out_offset;
    uint res_offset;
};
#endif
#if defined(SPLIT) && defined(OUT_PROJ)
layout(push_constant) uniform Push {
    AttnPush p;
    uint n_split;
    uint cnt_at;
    OprojPush op;
};
#elif defined(SPLIT)
layout(push_constant) uniform Push {
    AttnPush p;
    uint n_split;
    uint cnt_at;
};
#endif
#ifdef SPLIT
shared bool last_run; // this workgroup counted last for its (row, head)
// The last run's view of every run (at most MAX_SPLIT): max, sum, weight.
#define MAX_SPLIT 64u
shared float run_m[MAX_SPLIT];
shared float run_l[MAX_SPLIT];
shared float run_w[MAX_SPLIT];
#endif
#if defined(OUT_PROJ) && !defined(SPLIT)
layout(push_constant) uniform Push { AttnPush p; OprojPush op; };
#elif !defined(SPLIT)
layout(push_constant) uniform Push { AttnPush p; };
#endif

#ifdef OUT_PROJ
#include "weights.glsl"
// The projection's bindings follow the attention's.
#ifdef SPLIT
#define OP_B 6
#else
#define OP_B 5
#endif
layout(set = 0, binding = OP_B, std430) readonly buffer Wt { uint W[]; };
layout(set = 0, binding = OP_B + 1, std430) writeonly buffer Po { float PO[]; };
layout(set = 0, binding = OP_B + 2, std430) buffer Rt { float R[]; };
// The projection's block terms, [block][row] (the last head reads the
// others').
layout(set = 0, binding = OP_B + 3, std430) coherent buffer Pt { float PART[]; };
// The count of heads done (word 0; zero between dispatches).
layout(set = 0, binding = OP_B + 4, std430) coherent buffer Ct { uint CNT[]; };
#include "blocks.glsl"
// The head's output, then its blocks (9 words per 32 elements).
shared float hv[WG * ACC];
shared uint SA[WG * ACC / 32u * 9u];
#define ACT(ab, t, k) SA[(ab) + (k)]
#define QT 1u
#include "qdot.glsl"
#define QUANT_WG WG
#define QV(i) hv[i]
#define QSTORE(w, v) SA[w] = (v)
#include "quant_row.glsl"
shared bool last_head;
#include "terms.glsl"

// The projection of the head's output, hv[0..dv] (written before a
// barrier): its terms, the count, and by the last head the rows. Every
// invocation of the workgroup calls it.
void out_proj(uint h, uint tid, uint dv) {
    quant_row(tid, dv, 0u);
    barrier();
    uint nbh = dv / BLOCK_ELEMS;           // the head's blocks
    uint n_blocks = p.n_head * nbh;        // the projection's input blocks
    for (uint i = tid; i < op.rows * nbh; i += WG) {
        uint row = i / nbh;
        uint j = i % nbh;
        uint blk = h * nbh + j;
        float a[1];
        a[0] = 0.0;
        uint ab[1];
        ab[0] = j * ACT_WORDS;
        qdot_block(row * op.row_bytes + blk * BLOCK_BYTES, ab, a);
        PART[blk * op.rows + row] = a[0];
    }
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) {
        last_head = atomicAdd(CNT[0], 1u) == p.n_head - 1u;
    }
    barrier();
    if (!last_head) {
        return;
    }
    memoryBarrierBuffer();
    for (uint row = tid; row < op.rows; row += WG) {
        float y = terms_sum(row, op.rows, n_blocks);
        PO[op.out_offset + row] = y;
        uint ri = op.res_offset + row;
        R[ri] = R[ri] + y;
    }
    if (tid == 0u) {
        CNT[0] = 0u; // for the next dispatch
    }
}
#endif

// The row's query, read four at a time (vec4: a quarter of the
// shared-memory reads).
shared vec4 sq[MAX_DK / 4];
// The tile's probabilities, read four at a time where aligned.
shared vec4 sp[WG / 4];
shared float red[WG]; // reduction scratch

KV_ELEMENT_FN(v_at, vc)
KV_ELEMENT_FN(k_at, kc)

// The scores of a tile's keys j0 .. j0 + n: invocation tid < n gets
// q . K[j0 + tid], summed over the dimensions in order as the CPU does
// (a tile or two per workgroup in decode, latency-bound): each invocation
// reads its own key, RUN_K elements in flight at once, in reads of KVEC
// elements where the key is aligned to them (the same sum, in order).
float tile_dots(uint j0, uint n, uint kbase, uint tid) {
    precise float s = 0.0;
    uint dk = p.head_dim_k;
    if (tid < n) {
        uint base = (j0 + tid) * p.k_width + kbase;
        uint i = 0u;
        if (base % KVEC == 0u) {
            for (; i + RUN_K <= dk; i += RUN_K) {
                KV_VEC kv[RUN_K / KVEC];
                for (uint u = 0u; u < RUN_K / KVEC; u++) {
                    kv[u] = kc4[(base + i) / KVEC + u];
                }
                for (uint u = 0u; u < RUN_K / KVEC; u++) {
                    uint e = i + KVEC * u;
                    KV_VEC_DOT(s, sq, kv[u], e)
                }
            }
        }
        for (; i + LOADS <= dk; i += LOADS) {
            float kv[LOADS];
            for (uint u = 0u; u < LOADS; u++) {
                kv[u] = k_at(base + i + u);
            }
            for (uint u = 0u; u < LOADS; u++) {
                s += sq[(i + u) >> 2][(i + u) & 3u] * kv[u];
            }
        }
        for (; i < dk; i++) {
            s += sq[i >> 2][i & 3u] * k_at(base + i);
        }
    }
    return s;
}


void main() {
    uint h = gl_WorkGroupID.x;
    uint tid = gl_LocalInvocationID.x;
    uint t = gl_WorkGroupID.y; // the row, at position pos
    uint g = h / p.group;
    uint pos = step_words[p.pos_at] + t;
    uint first = first_seen(pos, p.window);
    uint dk = p.head_dim_k;
    uint dv = p.head_dim_v;

    uint qbase = p.q_offset + (t * p.n_head + h) * dk;
    for (uint i = tid; i < dk; i += WG) {
        sq[i >> 2][i & 3u] = Q_IN(q[qbase + i]);
    }
    barrier();

    float m = MAX_START; // running max
    precise float l = 0.0; // running sum of exp(s - m)
    float acc[ACC];
    for (uint a = 0u; a < ACC; a++) {
        acc[a] = 0.0;
    }
    uint kbase = g * dk;
    uint vbase = g * dv;

    // Keys lo..hi: every one the row sees, or this workgroup's run of them
    // (the tile's ka..kb; a tile with none of them leaves the row as it
    // was).
    uint lo = first;
    uint hi = pos + 1u;
#ifdef SPLIT
    uint chunk = (hi - lo + n_split - 1u) / n_split;
    lo = min(lo + gl_WorkGroupID.z * chunk, hi);
    hi = min(lo + chunk, hi);
#endif
    for (uint j0 = lo; j0 < hi; j0 += WG) {
        uint n = min(uint(WG), hi - j0);
        uint ka = first > j0 ? min(first - j0, n) : 0u;
        uint kb = pos + 1u > j0 ? min(n, pos + 1u - j0) : 0u;
        float s = NEG_INF;
        float dot = tile_dots(j0, n, kbase, tid);
        if (tid >= ka && tid < kb) {
            s = p.scale * dot;
            if (p.softcap > 0.0) {
                s = p.softcap * tanh_accurate(s / p.softcap);
            }
        }
        // Tile max.
        red[tid] = s;
        barrier();
        for (uint w = WG / 2; w > 0u; w >>= 1) {
            if (tid < w) {
                red[tid] = max(red[tid], red[tid + w]);
            }
            barrier();
        }
        float m_new = RUNNING_MAX(max(m, red[0]));
        float alpha = m == NEG_INF ? 0.0 : exp(m - m_new);
        // A score of -inf weighs 0 (exp(-inf - -inf) would be NaN while
        // every score so far is -inf).
        float e = s != NEG_INF ? exp(s - m_new) : 0.0;
        sp[tid >> 2][tid & 3u] = e;
        barrier();
        // Tile sum.
        red[tid] = e;
        barrier();
        for (uint w = WG / 2; w > 0u; w >>= 1) {
            if (tid < w) {
                red[tid] += red[tid + w];
            }
            barrier();
        }
        if (ka < kb) {
            l = l * alpha + red[0];
            m = m_new;
            for (uint a = 0u; a < ACC; a++) {
                uint d = tid + a * WG;
                if (d < dv) {
                    precise float x = acc[a] * alpha;
                    uint vrow = (j0 + ka) * p.v_width + vbase + d;
                    uint jj = ka;
                    // LOADS keys' values in flight together, then
                    // summed in order.
                    for (; jj + LOADS <= kb; jj += LOADS) {
                        float vv[LOADS];
                        for (uint u = 0u; u < LOADS; u++) {
                            vv[u] = v_at(vrow + u * p.v_width);
                        }
                        uint pj = jj;
                        if ((pj & 3u) == 0u) {
                            for (uint u = 0u; u < LOADS; u += 4u) {
                                vec4 pr = sp[(pj + u) >> 2];
                                x += pr.x * vv[u];
                                x += pr.y * vv[u + 1u];
                                x += pr.z * vv[u + 2u];
                                x += pr.w * vv[u + 3u];
                            }
                        } else {
                            for (uint u = 0u; u < LOADS; u++) {
                                x += sp[(pj + u) >> 2][(pj + u) & 3u] * vv[u];
                            }
                        }
                        vrow += LOADS * p.v_width;
                    }
                    for (; jj < kb; jj++) {
                        x += sp[jj >> 2][jj & 3u] * v_at(vrow);
                        vrow += p.v_width;
                    }
                    acc[a] = x;
                }
            }
        }
        barrier(); // before the next tile overwrites sp and red
    }

#ifdef SPLIT
    uint stride = dv + 2u;
    uint base = (t * p.n_head + h) * n_split * stride;
    uint pb = base + gl_WorkGroupID.z * stride;
    if (tid == 0u) {
        part[pb] = floatBitsToUint(m);
        part[pb + 1u] = floatBitsToUint(l);
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
    // The runs' maxima and sums into shared memory, a run an invocation,
    // then each run's weight once; the sums below in run order as ever.
    for (uint s = tid; s < n_split; s += WG) {
        run_m[s] = uintBitsToFloat(part[base + s * stride]);
        run_l[s] = uintBitsToFloat(part[base + s * stride + 1u]);
    }
    barrier();
    float mx = NEG_INF;
    for (uint s = 0u; s < n_split; s++) {
        mx = max(mx, run_m[s]);
    }
    for (uint s = tid; s < n_split; s += WG) {
        float ms = run_m[s];
        run_w[s] = ms == NEG_INF ? 0.0 : exp(ms - mx);
    }
    barrier();
    precise float lsum = 0.0;
    for (uint s = 0u; s < n_split; s++) {
        lsum += run_w[s] * run_l[s];
    }
    float inv = 1.0 / lsum;
    uint obase = p.out_offset + (t * p.n_head + h) * dv;
    for (uint d = tid; d < dv; d += WG) {
        precise float x = 0.0;
        uint s = 0u;
        // LOADS runs' values in flight together, then summed in order.
        for (; s + LOADS <= n_split; s += LOADS) {
            float av[LOADS];
            for (uint u = 0u; u < LOADS; u++) {
                av[u] = uintBitsToFloat(part[base + (s + u) * stride + 2u + d]);
            }
            for (uint u = 0u; u < LOADS; u++) {
                x += run_w[s + u] * av[u];
            }
        }
        for (; s < n_split; s++) {
            x += run_w[s] * uintBitsToFloat(part[base + s * stride + 2u + d]);
        }
        o[obase + d] = x * inv;
#ifdef OUT_PROJ
        hv[d] = x * inv;
#endif
    }
    if (tid == 0u) {
        part[cnt] = 0u; // for the next dispatch
    }
#ifdef OUT_PROJ
    barrier();
    out_proj(h, tid, dv);
#endif
#else
    float inv = 1.0 / l;
    uint obase = p.out_offset + (t * p.n_head + h) * dv;
    for (uint a = 0u; a < ACC; a++) {
        uint d = tid + a * WG;
        if (d < dv) {
            o[obase + d] = acc[a] * inv;
#ifdef OUT_PROJ
            hv[d] = acc[a] * inv;
#endif
        }
    }
#ifdef OUT_PROJ
    barrier();
    out_proj(h, tid, dv);
#endif
#endif
}
