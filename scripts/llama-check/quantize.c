// quantize IN OUT FTYPE [NTHREAD]: llama.cpp's llama_model_quantize with
// requantizing allowed (the reference for `sharpi quantize`).
#include <stdio.h>
#include <stdlib.h>
#include "llama.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: quantize IN OUT FTYPE [NTHREAD]\n");
        return 2;
    }
    llama_backend_init();
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = (enum llama_ftype) atoi(argv[3]);
    p.allow_requantize = true;
    p.nthread = argc > 4 ? atoi(argv[4]) : 2;
    return (int) llama_model_quantize(argv[1], argv[2], &p);
}
