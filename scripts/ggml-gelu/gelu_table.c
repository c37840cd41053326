// ggml's GELU lookup table (ggml_table_gelu_f16), built exactly as
// ggml_cpu_init builds it (ggml/src/ggml-cpu/ggml-cpu.c), with ggml's own
// inline functions from vec.h and simd-mappings.h; prints its FNV-1a 64
// hash over the 65,536 little-endian u16 entries, and a few entries.
// Compiled by scripts/ggml-gelu/run with llama-cpp-sys-2's x86 flags.
#include "ggml-cpu-impl.h"
#include "vec.h"
#include <stdio.h>

ggml_fp16_t ggml_table_gelu_f16[1 << 16];
ggml_fp16_t ggml_table_gelu_quick_f16[1 << 16];
float ggml_table_f32_f16[1 << 16];

int main(void) {
    unsigned long long h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < (1 << 16); ++i) {
        union { uint16_t u16; ggml_fp16_t fp16; } u = {i};
        float f = GGML_COMPUTE_FP16_TO_FP32(u.fp16);
        ggml_table_gelu_f16[i] = GGML_CPU_FP32_TO_FP16(ggml_gelu_f32(f));
        uint16_t b;
        memcpy(&b, &ggml_table_gelu_f16[i], 2);
        h = (h ^ (b & 0xff)) * 0x100000001b3ULL;
        h = (h ^ (b >> 8)) * 0x100000001b3ULL;
    }
    printf("fnv1a64 %016llx\n", h);
    const int show[] = {0x0000, 0x3c00, 0xbc00, 0x4000, 0xbfff, 0xc000, 0x4900, 0xc900};
    for (size_t k = 0; k < sizeof show / sizeof show[0]; k++) {
        uint16_t b;
        memcpy(&b, &ggml_table_gelu_f16[show[k]], 2);
        printf("0x%04x -> 0x%04x\n", show[k], b);
    }
    return 0;
}
