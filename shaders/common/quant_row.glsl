// One row's values quantized to Q8_0 or Q8_1 blocks (ACT_Q8_0 / ACT_Q8_1;
// layout in act.glsl) by one workgroup of QUANT_WG invocations, the bytes
// quantize_act.comp writes: eight invocations per block of 32, one word of
// four quants each; every invocation of a block finds the block's amax and
// scale itself (rms_norm.comp's fused quantization, and the decode
// matvec's prologues in matvec.comp).
//
// The includer includes act.glsl, defines QUANT_WG (a multiple of 8),
// QV(i) (the value of element i, an f32, typically from shared memory the
// whole workgroup wrote before a barrier) and QSTORE(w, v) (stores word v
// at word w of the blocks).
#ifndef SHARPI_QUANT_ROW_GLSL
#define SHARPI_QUANT_ROW_GLSL

#ifdef ACT_Q8_1
shared int part_sum[QUANT_WG];
#endif

// Quantizes elements 0..n (n a multiple of 32) into blocks from word qb.
// Every invocation of the workgroup calls it (Q8_1: it has barriers).
void quant_row(uint tid, uint n, uint qb) {
    uint n_words = (n / 32u) * 8u;
    // Every round of QUANT_WG invocations is uniform.
    for (uint base = 0u; base < n_words; base += QUANT_WG) {
        uint k = base + tid;
        uint seg = k / 8u;
        uint wi = k % 8u;
        bool live = k < n_words;
        uint d = 0u;
        int sum = 0;
        if (live) {
            uint c0 = 32u * seg;
            uint amax = 0u;
            for (uint i = 0u; i < 32u; i++) {
                amax = q8_amax_step(amax, floatBitsToUint(QV(c0 + i)));
            }
            uint id;
            q8_scales(amax, d, id);
            uint word = 0u;
            for (uint j = 0u; j < 4u; j++) {
                int q = q8_quant(floatBitsToUint(QV(c0 + 4u * wi + j)), id);
                sum += q; // wraps, as ggml's epi32 sums
                word |= (uint(clamp(q, -128, 127)) & 0xffu) << (8u * j);
            }
            QSTORE(qb + 9u * seg + 1u + wi, word);
        }
#ifdef ACT_Q8_1
        part_sum[tid] = sum;
        barrier();
        for (uint j = 1u; j < 8u; j++) {
            sum += part_sum[(tid & ~7u) + (wi + j) % 8u];
        }
        barrier(); // part_sum is rewritten by the next round
#endif
        if (live && wi == 0u) {
            QSTORE(qb + 9u * seg, q8_head(d, sum));
        }
    }
}

#endif
