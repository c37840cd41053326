// ggml's own CPU kernels on the shapes engine/benches/cpu_matmul.rs times,
// one thread, for a side-by-side ratio (scripts/bench-ggml-dot builds it
// from the AVX2 build of scripts/ggml-dot/build.sh). A matvec is what
// ggml's mul_mat does for one token: from_float on the activations, then
// vec_dot per row; the prefill loop is its 16 x 16 blocked walk over rows
// and tokens (ggml_compute_forward_mul_mat_one_chunk). Times are the
// fastest call, as engine/benches/cpu_matmul.rs reports them.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
typedef void (*from_float_fn)(const float *, void *, int64_t);
void ggml_vec_dot_q4_1_q8_1(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_q5_0_q8_0(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_q8_0_q8_0(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_q4_K_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_q6_K_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void quantize_row_q8_0(const float *, void *, int64_t);
void quantize_row_q8_1(const float *, void *, int64_t);
void quantize_row_q8_K(const float *, void *, int64_t);
void shim_init(void);

struct kind {
    const char * name;
    int elems, bytes, act_bytes;
    int f16_fields[2];
    from_float_fn act;
    dot_fn dot;
};
static const struct kind KINDS[] = {
    { "Q4_1", 32, 20, 36, { 0, 2 }, quantize_row_q8_1, ggml_vec_dot_q4_1_q8_1 },
    { "Q8_0", 32, 34, 34, { 0, -1 }, quantize_row_q8_0, ggml_vec_dot_q8_0_q8_0 },
    { "Q4_K", 256, 144, 292, { 0, 2 }, quantize_row_q8_K, ggml_vec_dot_q4_K_q8_K },
    { "Q6_K", 256, 210, 292, { 208, -1 }, quantize_row_q8_K, ggml_vec_dot_q6_K_q8_K },
    { "Q5_0", 32, 22, 34, { 0, -1 }, quantize_row_q8_0, ggml_vec_dot_q5_0_q8_0 },
};
struct shape { const char * name; int rows, cols; };
static const struct shape SHAPES[] = {
    { "attn q/o", 576, 576 }, { "ffn gate/up", 1536, 576 }, { "ffn down", 576, 1536 }, { "head", 49152, 576 },
};
enum { TOKENS = 128 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void * a, const void * b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t state = 0x5EED;
static uint64_t next(void) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define TIME(budget, body) ({                                          \
    static double samples[100000]; int ns = 0; double t0 = now();             \
    for (int warm_ = 0; warm_ < 3; warm_++) { body; }                              \
    while ((now() - t0 < (budget) || ns < 5) && ns < 100000) {         \
        double s = now(); body; samples[ns++] = now() - s;             \
    }                                                                  \
    qsort(samples, ns, sizeof(double), cmp); samples[0]; })

int main(int argc, char ** argv) {
    const double budget = argc > 1 ? atof(argv[1]) : 0.4;
    shim_init();
    printf("ggml AVX2 kernels, 1 thread; prefill: %d tokens\n", TOKENS);
    printf("%-6s %-12s %12s | %9s %7s | %9s %7s\n", "type", "shape", "rows x cols", "matvec us", "GFLOP/s", "prefill ms", "GFLOP/s");
    for (size_t k = 0; k < sizeof(KINDS) / sizeof(KINDS[0]); k++) {
        const struct kind * K = &KINDS[k];
        for (size_t s = 0; s < sizeof(SHAPES) / sizeof(SHAPES[0]); s++) {
            const struct shape * S = &SHAPES[s];
            if (!strcmp(S->name, "head") && strcmp(K->name, "Q8_0")) continue;
            const int rows = S->rows, cols = (S->cols + K->elems - 1) / K->elems * K->elems;
            const size_t rb = (size_t)cols / K->elems * K->bytes, ab = (size_t)cols / K->elems * K->act_bytes;
            uint8_t * w = malloc(rows * rb);
            for (size_t i = 0; i < rows * rb; i++) w[i] = next() & 0xFF;
            for (size_t b = 0; b < rows * rb / K->bytes; b++)
                for (int f = 0; f < 2; f++)
                    if (K->f16_fields[f] >= 0) { w[b * K->bytes + K->f16_fields[f]] = 0x00; w[b * K->bytes + K->f16_fields[f] + 1] = 0x20; }
            float * x = malloc(sizeof(float) * cols * TOKENS);
            for (int i = 0; i < cols * TOKENS; i++) x[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
            uint8_t * a = malloc(ab * TOKENS);
            float * y = malloc(sizeof(float) * rows * TOKENS);
            const double mv = TIME(budget, {
                K->act(x, a, cols);
                for (int r = 0; r < rows; r++) K->dot(cols, &y[r], 0, w + r * rb, 0, a, 0, 1);
            });
            const double pre = TIME(budget, {
                for (int t = 0; t < TOKENS; t++) K->act(x + (size_t)t * cols, a + t * ab, cols);
                for (int t0 = 0; t0 < TOKENS; t0 += 16)
                    for (int r0 = 0; r0 < rows; r0 += 16)
                        for (int t = t0; t < t0 + 16 && t < TOKENS; t++)
                            for (int r = r0; r < r0 + 16 && r < rows; r++)
                                K->dot(cols, &y[(size_t)t * rows + r], 0, w + r * rb, 0, a + t * ab, 0, 1);
            });
            const double flop = 2.0 * rows * cols;
            printf("%-6s %-12s %5d x %4d | %9.1f %7.1f | %9.2f %7.1f\n", K->name, S->name, rows, cols,
                   mv * 1e6, flop / mv / 1e9, pre * 1e3, flop * TOKENS / pre / 1e9);
            free(w); free(x); free(a); free(y);
        }
    }
    return 0;
}
