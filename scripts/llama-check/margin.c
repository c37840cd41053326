// margin MODEL PROMPTS [STEPS]: for each prompt line ("\n" escapes allowed),
// the top-1/top-2 logit margin of the first generated token, the logits'
// standard deviation, and STEPS greedy tokens; then the smallest margin.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void) l; (void) t; (void) u; }

static int argmax(const float *l, int n) {
    int b = 0;
    for (int v = 1; v < n; v++) if (l[v] > l[b]) b = v;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: margin MODEL PROMPTS [STEPS]\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int nv = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512; cp.n_batch = 512; cp.n_threads = 2; cp.n_threads_batch = 2;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    FILE *f = fopen(argv[2], "r");
    if (!f) { fprintf(stderr, "cannot read %s\n", argv[2]); return 1; }
    int steps = argc > 3 ? atoi(argv[3]) : 0;
    char line[4096], text[4096], piece[256];
    double min_margin = INFINITY;
    while (fgets(line, sizeof line, f)) {
        size_t n = 0;
        for (size_t i = 0; line[i] && line[i] != '\n'; i++) {
            if (line[i] == '\\' && line[i + 1] == 'n') { text[n++] = '\n'; i++; }
            else text[n++] = line[i];
        }
        text[n] = 0;
        llama_token toks[1024];
        int nt = llama_tokenize(vocab, text, (int) n, toks, 1024, true, true);
        if (nt <= 0) { printf("tokenize failed: %s\n", text); return 1; }
        llama_memory_clear(llama_get_memory(ctx), true);
        if (llama_decode(ctx, llama_batch_get_one(toks, nt))) { printf("decode failed\n"); return 1; }
        const float *lg = llama_get_logits_ith(ctx, -1);
        int b1 = argmax(lg, nv), b2 = b1 == 0 ? 1 : 0;
        double mean = 0, sq = 0;
        for (int v = 0; v < nv; v++) {
            if (v != b1 && lg[v] > lg[b2]) b2 = v;
            mean += lg[v]; sq += (double) lg[v] * lg[v];
        }
        mean /= nv;
        double sd = sqrt(fmax(0, sq / nv - mean * mean));
        double m = lg[b1] - lg[b2];
        if (m < min_margin) min_margin = m;
        int pn = llama_token_to_piece(vocab, b1, piece, 255, 0, true);
        piece[pn > 0 ? pn : 0] = 0;
        printf("tokens %3d  top1 %6d %-16s margin %8.3f  logit sd %6.2f", nt, b1, piece, m, sd);
        llama_token t = b1;
        if (steps > 0) printf("  |");
        for (int s = 0; s < steps; s++) {
            if (llama_decode(ctx, llama_batch_get_one(&t, 1))) break;
            t = argmax(llama_get_logits_ith(ctx, -1), nv);
            pn = llama_token_to_piece(vocab, t, piece, 255, 0, true);
            piece[pn > 0 ? pn : 0] = 0;
            printf("%s", piece);
        }
        printf("\n");
    }
    printf("smallest margin %.3f\n", min_margin);
    return 0;
}
