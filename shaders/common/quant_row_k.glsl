// One row's values quantized to Q8_K blocks (layout in act.glsl) by one
// workgroup of QUANT_WG invocations, bit for bit as the CPU's
// quantize_row_q8_K_ref compiled with FMA (engine/src/cpu/act.rs):
// quantize_act.comp's Q8_K, and the decode matvec's prologues in
// matvec.comp for the super-block types. One invocation per segment (32
// elements, an eighth of a block), in rounds of QUANT_WG segments; a
// block's eight segments share a round and meet in shared memory.
//
// The includer includes act.glsl, defines QUANT_WG (a multiple of 8), QV(i)
// (element i, an f32, typically from shared memory the whole workgroup
// wrote before a barrier) and QSTORE(w, v) (stores word v at word w of the
// blocks).
#ifndef SHARPI_QUANT_ROW_K_GLSL
#define SHARPI_QUANT_ROW_K_GLSL

// Per segment: its first element of largest magnitude (bits of |x| and of
// x), NaN never counting.
shared uint seg_amax[QUANT_WG];
shared uint seg_max[QUANT_WG];

// Quantizes elements 0..n (n a multiple of 256) into blocks from word qb.
// Every invocation of the workgroup calls it (it has barriers).
void quant_row_k(uint tid, uint n, uint qb) {
    uint n_seg = n / 32u;
    // Every round is uniform over the workgroup.
    for (uint s0 = 0u; s0 < n_seg; s0 += QUANT_WG) {
        if (s0 > 0u) {
            barrier(); // the previous round's segments are read
        }
        uint seg = s0 + tid;
        bool live = seg < n_seg; // a whole block is live or not
        uint e0 = 32u * seg; // the segment's first element
        uint amax = 0u, mx = 0u;
        if (live) {
            for (uint i = 0u; i < 32u; i++) {
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
        if (live) {
            // The block's: the first segment holding its largest magnitude.
            uint first = tid & ~7u;
            amax = 0u;
            mx = 0u;
            for (uint k = first; k < first + 8u; k++) {
                if (seg_amax[k] > amax) {
                    amax = seg_amax[k];
                    mx = seg_max[k];
                }
            }
            uint blk = seg / 8u;
            uint part = seg % 8u;
            uint o = qb + Q8_K_WORDS * blk;
            uint qs[8];
            uint dbits = 0u;
            if (amax == 0u) {
                for (uint w = 0u; w < 8u; w++) {
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
                for (uint w = 0u; w < 8u; w++) {
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
            // Two bsums of 16 (i16, as ggml's: the quants are at most 127
            // apart).
            int sum0 = 0, sum1 = 0;
            for (uint w = 0u; w < 8u; w++) {
                ivec4 v = ivec4(uvec4(qs[w]) << uvec4(24u, 16u, 8u, 0u)) >> 24;
                int t = v.x + v.y + v.z + v.w;
                if (w < 4u) {
                    sum0 += t;
                } else {
                    sum1 += t;
                }
            }
            if (part == 0u) {
                QSTORE(o, dbits);
            }
            for (uint w = 0u; w < 8u; w++) {
                QSTORE(o + 1u + 8u * part + w, qs[w]);
            }
            QSTORE(o + 65u + part, (uint(sum0) & 0xffffu) | (uint(sum1) << 16));
        }
    }
}

#endif
