// One row's values quantized to Q8_K blocks (layout in act.glsl) by one
// workgroup of QUANT_WG invocations, bit for bit as the CPU's
// quantize_row_q8_K_ref compiled with FMA (engine/src/cpu/act.rs):
// quantize_act.comp's Q8_K, and the decode matvec's prologues in
// matvec.comp for the super-block types. One to four invocations per
// segment (32 elements, an eighth of a block: see quant_row_k); a block's
// eight segments share a round and meet in shared memory.
//
// The includer includes act.glsl, defines QUANT_WG (a multiple of 32), QV(i)
// (element i, an f32, typically from shared memory the whole workgroup
// wrote before a barrier) and QSTORE(w, v) (stores word v at word w of the
// blocks).
#ifndef SHARPI_QUANT_ROW_K_GLSL
#define SHARPI_QUANT_ROW_K_GLSL

// Per invocation: the first element of largest magnitude of its part of
// a segment (bits of |x| and of x), NaN never counting; its quants' sum.
shared uint seg_amax[QUANT_WG];
shared uint seg_max[QUANT_WG];
shared int seg_sum0[QUANT_WG];
shared int seg_sum1[QUANT_WG];

// Quantizes elements 0..n (n a multiple of 256) into blocks from word qb.
// Every invocation of the workgroup calls it (it has barriers). A
// segment takes sps invocations (4, 2 or 1: the most that still fit every
// segment into one round, else 1 and rounds of QUANT_WG segments), each
// with 32 / sps consecutive elements; a block's parts are folded in
// element order, so its amax is the first element of largest magnitude
// as one invocation a segment finds it.
void quant_row_k(uint tid, uint n, uint qb) {
    uint n_seg = n / 32u;
    uint sps = n_seg <= QUANT_WG / 4u ? 4u : n_seg <= QUANT_WG / 2u ? 2u : 1u;
    uint epi = 32u / sps;          // elements per invocation
    uint per_round = QUANT_WG / sps; // segments per round
    uint sub = tid % sps;
    // Every round is uniform over the workgroup.
    for (uint s0 = 0u; s0 < n_seg; s0 += per_round) {
        if (s0 > 0u) {
            barrier(); // the previous round's partials are read
        }
        uint seg = s0 + tid / sps;
        bool live = seg < n_seg; // a whole block is live or not
        uint e0 = 32u * seg + epi * sub; // this invocation's first element
        uint amax = 0u, mx = 0u;
        if (live) {
            for (uint i = 0u; i < epi; i++) {
                uint b = floatBitsToUint(QV(e0 + i));
                uint a = b & 0x7fffffffu;
                if (!is_nan_bits(a) && a > amax) {
                    amax = a;
                    mx = b;
                }
            }
        }
        seg_amax[tid] = amax;
        seg_max[tid] = mx;
        barrier();
        uint blk = seg / 8u;
        uint part = seg % 8u;
        uint o = qb + Q8_K_WORDS * blk;
        // The quants' sums of this invocation's elements in the segment's
        // first 16 and last 16.
        int qsum0 = 0, qsum1 = 0;
        if (live) {
            // The block's: its 8 sps parts in element order.
            uint first = (tid / sps) / 8u * 8u * sps; // (tid / sps) & ~7, times sps
            amax = 0u;
            mx = 0u;
            for (uint k = first; k < first + 8u * sps; k++) {
                if (seg_amax[k] > amax) {
                    amax = seg_amax[k];
                    mx = seg_max[k];
                }
            }
            uint qs[8];
            uint dbits = 0u;
            uint nw = epi / 4u; // words of this invocation
            if (amax == 0u) {
                for (uint w = 0u; w < nw; w++) {
                    qs[w] = 0u;
                }
            } else {
                // iscale = -127 / max; d = 1 / iscale.
                uint iscale;
                if (amax == 0x7f800000u) {
                    iscale = (mx ^ 0x80000000u) & 0x80000000u; // -127 / ±inf = ∓0
                } else if (amax < 0x00800000u) {
                    iscale = ((mx ^ 0x80000000u) & 0x80000000u) | 0x7f800000u; // overflow
                } else {
                    iscale = div_rn(0xc2fe0000u, mx); // -127.0
                }
                if ((iscale & 0x7fffffffu) == 0u) {
                    dbits = (iscale & 0x80000000u) | 0x7f800000u; // 1 / ∓0
                } else if ((iscale & 0x7fffffffu) == 0x7f800000u) {
                    dbits = iscale & 0x80000000u; // 1 / ∓inf
                } else {
                    dbits = div_rn(0x3f800000u, iscale);
                }
                bool iscale_finite_nonzero = is_finite_bits(iscale) && (iscale & 0x7fffffffu) != 0u;
                // q = min(127, nearest_int(iscale * x)): the product rounded
                // to f32, then to an integer (ggml-base's build has no FMA to
                // fuse them). Where the product is NaN or ±inf (x NaN,
                // iscale 0 or inf) its bits give 0 after ggml's mask; so
                // does 0 * finite.
                for (uint w = 0u; w < nw; w++) {
                    uint word = 0u;
                    for (uint j = 0u; j < 4u; j++) {
                        uint xb = floatBitsToUint(QV(e0 + 4u * w + j));
                        int q = 0;
                        if (iscale_finite_nonzero && is_finite_bits(xb) && (xb & 0x7fffffffu) != 0u) {
                            q = min(round_product(xb, iscale, true), 127);
                        }
                        word |= (uint(q) & 0xffu) << (8u * j);
                    }
                    qs[w] = word;
                }
            }
            for (uint w = 0u; w < nw; w++) {
                ivec4 v = ivec4(uvec4(qs[w]) << uvec4(24u, 16u, 8u, 0u)) >> 24;
                int t = v.x + v.y + v.z + v.w;
                if (nw * sub + w < 4u) {
                    qsum0 += t;
                } else {
                    qsum1 += t;
                }
            }
            if (part == 0u && sub == 0u) {
                QSTORE(o, dbits);
            }
            for (uint w = 0u; w < nw; w++) {
                QSTORE(o + 1u + 8u * part + nw * sub + w, qs[w]);
            }
        }
        seg_sum0[tid] = qsum0;
        seg_sum1[tid] = qsum1;
        barrier();
        if (live && sub == 0u) {
            // Two bsums of 16 (i16, as ggml's: the quants are at most 127
            // apart), over the segment's parts.
            int sum0 = 0, sum1 = 0;
            for (uint k = 0u; k < sps; k++) {
                sum0 += seg_sum0[tid + k];
                sum1 += seg_sum1[tid + k];
            }
            QSTORE(o + 65u + part, (uint(sum0) & 0xffffu) | (uint(sum1) << 16));
        }
    }
}

#endif
