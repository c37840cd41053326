// bench MODEL PP TG REPS THREADS: llama.cpp's prefill and decode speed,
// measured as llama-bench measures pp and tg (and as `sharpi bench` does):
// PP pseudo-random tokens (BOS first when the model adds one) decoded as one
// batch into an empty context, and TG single-token decodes from an empty
// context; one warm-up, then REPS repetitions, median tokens/s printed.
// Context defaults otherwise (llama.cpp's f16 KV cache, flash attention
// as its default decides).
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "llama.h"

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void) l; (void) t; (void) u; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: bench MODEL PP TG REPS THREADS\n");
        return 2;
    }
    int pp = atoi(argv[2]), tg = atoi(argv[3]), reps = atoi(argv[4]), threads = atoi(argv[5]);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int nv = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    int n_ctx = pp > tg ? pp : tg;
    cp.n_ctx = n_ctx; cp.n_batch = n_ctx; cp.n_ubatch = n_ctx;
    cp.n_threads = threads; cp.n_threads_batch = threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create a context\n"); return 1; }
    llama_token *toks = malloc(sizeof *toks * (n_ctx > 0 ? n_ctx : 1));
    srand(1);
    for (int i = 0; i < n_ctx; i++) toks[i] = rand() % nv;
    if (llama_vocab_get_add_bos(vocab)) toks[0] = llama_vocab_bos(vocab);
    double *rate = malloc(sizeof *rate * (reps + 1));
    if (pp > 0) {
        for (int r = 0; r <= reps; r++) {
            llama_memory_clear(llama_get_memory(ctx), true);
            double t = now();
            if (llama_decode(ctx, llama_batch_get_one(toks, pp))) { fprintf(stderr, "decode failed\n"); return 1; }
            llama_synchronize(ctx);
            if (r > 0) rate[r - 1] = pp / (now() - t);
        }
        printf("prefill %-4d %9.1f tokens/s  (llama.cpp, median of %d)\n", pp, median(rate, reps), reps);
    }
    if (tg > 0) {
        for (int r = 0; r <= reps; r++) {
            llama_memory_clear(llama_get_memory(ctx), true);
            double total = 0;
            for (int i = 0; i < tg; i++) {
                double t = now();
                if (llama_decode(ctx, llama_batch_get_one(&toks[i], 1))) { fprintf(stderr, "decode failed\n"); return 1; }
                llama_synchronize(ctx);
                total += now() - t;
            }
            if (r > 0) rate[r - 1] = tg / total;
        }
        printf("decode %-5d %9.1f tokens/s  (llama.cpp, median of %d)\n", tg, median(rate, reps), reps);
    }
    return 0;
}
