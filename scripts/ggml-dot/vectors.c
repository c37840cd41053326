// Dot-product vectors from ggml's own CPU kernels, for
// engine/tests/cpu_ggml_vectors.rs. Built and run by scripts/gen-dot-vectors,
// which links two builds of ggml's kernels into this program: its x86 AVX2
// build (the flags llama-cpp-sys-2 uses here: -mavx2 -mfma -mf16c) and a
// baseline x86-64 build whose generic kernels are renamed base_*.
//
// Each case is generated from a SplitMix64 stream that the Rust test
// reproduces exactly (every value is built from integers and powers of
// two). One line per case:
//   TYPE CASE N ACT_FNV64 AVX2_BITS GENERIC_BITS
// ACT_FNV64 hashes the activation bytes ggml's x86 build makes (from_float of
// the vec_dot_type); AVX2_BITS is the f32 result of the AVX2 vec_dot on
// them, GENERIC_BITS that of the baseline generic vec_dot on the same bytes.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <immintrin.h>

#include "ggml.h"
#include "ggml-impl.h"

typedef void (*dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
typedef void (*from_float_fn)(const float *, void *, int64_t);

#define DECL(name) \
    void name(int, float *, size_t, const void *, size_t, const void *, size_t, int); \
    void base_##name##_generic(int, float *, size_t, const void *, size_t, const void *, size_t, int);
DECL(ggml_vec_dot_q4_0_q8_0)
DECL(ggml_vec_dot_q4_1_q8_1)
DECL(ggml_vec_dot_q5_0_q8_0)
DECL(ggml_vec_dot_q5_1_q8_1)
DECL(ggml_vec_dot_q8_0_q8_0)
DECL(ggml_vec_dot_q2_K_q8_K)
DECL(ggml_vec_dot_q3_K_q8_K)
DECL(ggml_vec_dot_q4_K_q8_K)
DECL(ggml_vec_dot_q5_K_q8_K)
DECL(ggml_vec_dot_q6_K_q8_K)
void ggml_vec_dot_f32(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_f16(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_bf16(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void base_ggml_vec_dot_f32(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void base_ggml_vec_dot_f16(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void base_ggml_vec_dot_bf16(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void quantize_row_q8_0(const float *, void *, int64_t);
void quantize_row_q8_1(const float *, void *, int64_t);
void quantize_row_q8_K(const float *, void *, int64_t);
void shim_init(void);

static void act_f32(const float * x, void * y, int64_t n) { memcpy(y, x, 4 * n); }
static void act_f16(const float * x, void * y, int64_t n) {
    uint16_t * o = y;
    for (int64_t i = 0; i < n; i++) o[i] = _cvtss_sh(x[i], 0);
}
static void act_bf16(const float * x, void * y, int64_t n) {
    ggml_bf16_t * o = y;
    for (int64_t i = 0; i < n; i++) o[i] = GGML_FP32_TO_BF16(x[i]);
}

struct kind {
    const char * name;
    uint32_t id, elems, bytes;  // the weight type: GGUF id, block geometry
    uint32_t act_elems, act_bytes;
    int f16_fields[2];          // byte offsets of f16 scales in a block, -1 for none
    from_float_fn act;
    dot_fn simd, generic;
};

#define Q(n, id, e, b, ae, ab, f0, f1, act, fn) \
    { n, id, e, b, ae, ab, { f0, f1 }, act, fn, base_##fn##_generic }
static const struct kind KINDS[] = {
    { "F32", 0, 1, 4, 1, 4, { -1, -1 }, act_f32, ggml_vec_dot_f32, base_ggml_vec_dot_f32 },
    { "F16", 1, 1, 2, 1, 2, { -1, -1 }, act_f16, ggml_vec_dot_f16, base_ggml_vec_dot_f16 },
    Q("Q4_0", 2, 32, 18, 32, 34, 0, -1, quantize_row_q8_0, ggml_vec_dot_q4_0_q8_0),
    Q("Q4_1", 3, 32, 20, 32, 36, 0, 2, quantize_row_q8_1, ggml_vec_dot_q4_1_q8_1),
    Q("Q5_0", 6, 32, 22, 32, 34, 0, -1, quantize_row_q8_0, ggml_vec_dot_q5_0_q8_0),
    Q("Q5_1", 7, 32, 24, 32, 36, 0, 2, quantize_row_q8_1, ggml_vec_dot_q5_1_q8_1),
    Q("Q8_0", 8, 32, 34, 32, 34, 0, -1, quantize_row_q8_0, ggml_vec_dot_q8_0_q8_0),
    Q("Q2_K", 10, 256, 84, 256, 292, 80, 82, quantize_row_q8_K, ggml_vec_dot_q2_K_q8_K),
    Q("Q3_K", 11, 256, 110, 256, 292, 108, -1, quantize_row_q8_K, ggml_vec_dot_q3_K_q8_K),
    Q("Q4_K", 12, 256, 144, 256, 292, 0, 2, quantize_row_q8_K, ggml_vec_dot_q4_K_q8_K),
    Q("Q5_K", 13, 256, 176, 256, 292, 0, 2, quantize_row_q8_K, ggml_vec_dot_q5_K_q8_K),
    Q("Q6_K", 14, 256, 210, 256, 292, 208, -1, quantize_row_q8_K, ggml_vec_dot_q6_K_q8_K),
    { "BF16", 30, 1, 2, 1, 2, { -1, -1 }, act_bf16, ggml_vec_dot_bf16, base_ggml_vec_dot_bf16 },
};

static uint64_t state;
static uint64_t next(void) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A finite normal f16 of either sign, magnitude 2^-10 .. 2^2.
static uint16_t rand_f16(void) {
    uint16_t s = next() & 1, e = 5 + next() % 12, m = next() & 0x3FF;
    return (uint16_t)(s << 15 | e << 10 | m);
}

static void put16(uint8_t * p, uint16_t v) { p[0] = v & 0xFF; p[1] = v >> 8; }

int main(int argc, char ** argv) {
    const int cases = argc > 1 ? atoi(argv[1]) : 256;
    shim_init();
    static uint8_t w[8 * 292 * 2], a[8 * 292 * 2];
    static float x[2048];
    for (size_t t = 0; t < sizeof(KINDS) / sizeof(KINDS[0]); t++) {
        const struct kind * k = &KINDS[t];
        for (int i = 0; i < cases; i++) {
            state = (uint64_t)k->id << 32 | (uint32_t)i;
            uint32_t n = k->elems == 1 ? 1 + next() % 300 : (1 + i % 8) * k->elems;
            uint32_t wbytes = n / k->elems * k->bytes;
            for (uint32_t j = 0; j < wbytes; j++) w[j] = next() & 0xFF;
            if (k->id == 0) {
                for (uint32_t j = 0; j < n; j++) {
                    float v = (float)((int)(next() % 2001) - 1000) * (1.0f / 1024.0f);
                    memcpy(w + 4 * j, &v, 4);
                }
            } else if (k->id == 1) {
                for (uint32_t j = 0; j < n; j++) put16(w + 2 * j, rand_f16());
            } else if (k->id == 30) {
                for (uint32_t j = 0; j < n; j++) {
                    uint16_t s = next() & 1, e = 117 + next() % 11, m = next() & 0x7F;
                    put16(w + 2 * j, (uint16_t)(s << 15 | e << 7 | m));
                }
            } else {
                for (uint32_t b = 0; b < n / k->elems; b++)
                    for (int f = 0; f < 2; f++)
                        if (k->f16_fields[f] >= 0) put16(w + b * k->bytes + k->f16_fields[f], rand_f16());
            }
            const float scale = ldexpf(1.0f, -(int)(10 + next() % 14));
            for (uint32_t j = 0; j < n; j++) x[j] = (float)((int64_t)(next() % 2000001) - 1000000) * scale;

            const uint32_t abytes = n / k->act_elems * k->act_bytes;
            memset(a, 0, abytes);
            k->act(x, a, n);
            uint64_t h = 0xcbf29ce484222325ull;
            for (uint32_t j = 0; j < abytes; j++) { h ^= a[j]; h *= 0x100000001b3ull; }

            float simd = 0, generic = 0;
            k->simd((int)n, &simd, 0, w, 0, a, 0, 1);
            k->generic((int)n, &generic, 0, w, 0, a, 0, 1);
            uint32_t sb, gb;
            memcpy(&sb, &simd, 4);
            memcpy(&gb, &generic, 4);
            printf("%s %d %u %016llx %08x %08x\n", k->name, i, n, (unsigned long long)h, sb, gb);
        }
    }
    return 0;
}
