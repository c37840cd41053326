// bench MODEL THREADS REPS PP TG DEPTH: llama.cpp's prefill or decode
// speed, measured as llama-bench measures pp and tg (and as `sharpi bench`
// does): DEPTH pseudo-random tokens decoded first as one batch (not
// timed), then PP tokens as one batch (PP > 0) or TG single-token decodes;
// from a cleared context each time, one warm-up, then REPS repetitions.
// Prints one JSON object with llama-bench's fields (n_prompt, n_gen,
// n_depth, n_threads, avg_ts, stddev_ts, samples_ts). Context defaults
// otherwise (llama.cpp's f16 KV cache, flash attention as its default
// decides).
#include <math.h>
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

static int run(struct llama_context *ctx, llama_token *toks, int n) {
    if (llama_decode(ctx, llama_batch_get_one(toks, n))) {
        fprintf(stderr, "decode failed\n");
        return 1;
    }
    llama_synchronize(ctx);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: bench MODEL THREADS REPS PP TG DEPTH\n");
        return 2;
    }
    int threads = atoi(argv[2]), reps = atoi(argv[3]), pp = atoi(argv[4]), tg = atoi(argv[5]),
        depth = atoi(argv[6]);
    if (reps < 1 || (pp > 0) == (tg > 0) || depth < 0) {
        fprintf(stderr, "bench: REPS >= 1, exactly one of PP and TG > 0, DEPTH >= 0\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int nv = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    int n = pp > 0 ? pp : tg;
    int n_ctx = depth + n;
    cp.n_ctx = n_ctx; cp.n_batch = n_ctx; cp.n_ubatch = n_ctx;
    cp.n_threads = threads; cp.n_threads_batch = threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create a context\n"); return 1; }
    llama_token *toks = malloc(sizeof *toks * n_ctx);
    srand(1);
    for (int i = 0; i < n_ctx; i++) toks[i] = rand() % nv;
    if (llama_vocab_get_add_bos(vocab)) toks[0] = llama_vocab_bos(vocab);
    double *rate = malloc(sizeof *rate * reps);
    for (int r = 0; r <= reps; r++) {
        llama_memory_clear(llama_get_memory(ctx), true);
        if (depth > 0 && run(ctx, toks, depth)) return 1;
        double t = now();
        if (pp > 0) {
            if (run(ctx, toks + depth, pp)) return 1;
        } else {
            for (int i = 0; i < tg; i++)
                if (run(ctx, toks + depth + i, 1)) return 1;
        }
        if (r > 0) rate[r - 1] = n / (now() - t);
    }
    double mean = 0, var = 0;
    for (int r = 0; r < reps; r++) mean += rate[r] / reps;
    for (int r = 0; r < reps; r++) var += (rate[r] - mean) * (rate[r] - mean);
    double sd = reps > 1 ? sqrt(var / (reps - 1)) : 0;
    printf("{\"n_threads\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, "
           "\"avg_ts\": %.6f, \"stddev_ts\": %.6f, \"samples_ts\": [",
           threads, pp > 0 ? pp : 0, pp > 0 ? 0 : tg, depth, mean, sd);
    for (int r = 0; r < reps; r++) printf("%s%.6f", r ? ", " : "", rate[r]);
    printf("]}\n");
    return 0;
}
