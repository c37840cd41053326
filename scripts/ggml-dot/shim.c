// The few ggml-base symbols the kernel sources reference, for
// scripts/gen-dot-vectors: conversion tables (filled exactly) and an abort.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stdbool.h>

float ggml_table_f32_f16[1 << 16];
float ggml_table_f32_e8m0_half[1 << 8];
float ggml_table_f32_ue4m3[1 << 8];

static float half_to_float(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1F, m = h & 0x3FF, u;
    if (e == 0x1F) u = s | 0x7F800000u | (m << 13);
    else if (e != 0) u = s | ((e + 112) << 23) | (m << 13);
    else if (m == 0) u = s;
    else {
        e = 113;
        while (!(m & 0x400)) { m <<= 1; e--; }
        u = s | (e << 23) | ((m & 0x3FF) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void shim_init(void) {
    for (uint32_t i = 0; i < (1u << 16); i++) ggml_table_f32_f16[i] = half_to_float((uint16_t)i);
}

void ggml_abort(const char * file, int line, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ggml_abort %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    abort();
}

// Reached only from quantization validation paths the vectors never take.
size_t ggml_row_size(int type, int64_t ne) { (void)type; (void)ne; abort(); }
size_t ggml_type_size(int type) { (void)type; abort(); }
const char * ggml_type_name(int type) { (void)type; abort(); }
