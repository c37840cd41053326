// The KV cache's element types in one place: how a cache buffer holds its
// elements, how the attention kernels read them and how every kernel that
// writes the cache writes them. The type (engine/src/kv_type.rs KvType) is
// the KV axis of engine/build/variants.rs (`{kv}` in a variant's name),
// chosen at compile time by its define (KvType::define): none for f32,
// KV_F16 for IEEE halves (two a 32-bit word, low first; rounded to nearest
// even when written). The decode kernels compiled once for every cache
// (norm_rope.comp, matvec.comp's EPI_ROPE) choose the write at run time by
// a code (KvType::cache_code: KV_CACHE_F32, KV_CACHE_F16 of the generated
// op_codes.glsl, engine/src/op_codes.rs).
// Macros, so that each kernel compiles as if they were written out in it.
// A new cache type adds its branch to each of them, its block reads and
// writes coming from blocks.glsl.
#ifndef SHARPI_KV_GLSL
#define SHARPI_KV_GLSL

#include "math.glsl"
#include "op_codes.glsl"

// A query element as the kernels read it: with an f16 cache rounded to f16
// (ties to even), as llama.cpp's CPU rounds the activation it multiplies an
// F16 cache with, so that every product q·k is that of two halves, exact in
// f32. (llama.cpp also rounds the normalised probabilities before V·p; the
// online softmax here weighs V before it knows the row's sum, so that
// rounding, relative 2^-12 per weight, is left out: docs/harness.md.)
#ifdef KV_F16
#define Q_IN(x) round_f16(x)
#else
#define Q_IN(x) (x)
#endif

#ifdef KV_F16
// A cache buffer's array element: one element's word, four elements'
// words (KV_WORD4), KVEC elements' 16 bytes (KV_VEC).
#define KV_WORD uint
#define KV_WORD4 uvec2
#define KV_VEC uvec4
#define KVEC 8u
// `float name(uint e)`: element e of cache buffer `buf` (of KV_WORD).
#define KV_ELEMENT_FN(name, buf) \
float name(uint e) { \
    vec2 h = unpackHalf2x16(buf[e >> 1]); \
    return (e & 1u) == 0u ? h.x : h.y; \
}
// `vec4 name(uint e)`: elements e .. e + 3 (e % 4 == 0) of cache buffer
// `buf` (of KV_WORD4).
#define KV_ELEMENT4_FN(name, buf) \
vec4 name(uint e) { \
    uvec2 w = buf[e >> 2]; \
    return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); \
}
// sum += query · read for the KVEC elements of one KV_VEC `read`, element
// e the first (query: shared vec4s of the query from element 0).
#define KV_VEC_DOT(sum, query, read, e) \
    for (uint w = 0u; w < 4u; w++) { \
        vec2 h = unpackHalf2x16(read[w]); \
        sum += query[(e + 2u * w) >> 2][(e + 2u * w) & 3u] * h.x; \
        sum += query[(e + 2u * w + 1u) >> 2][(e + 2u * w + 1u) & 3u] * h.y; \
    }
#else
#define KV_WORD float
#define KV_WORD4 vec4
#define KV_VEC vec4
#define KVEC 4u
#define KV_ELEMENT_FN(name, buf) \
float name(uint e) { \
    return buf[e]; \
}
#define KV_ELEMENT4_FN(name, buf) \
vec4 name(uint e) { \
    return buf[e >> 2]; \
}
#define KV_VEC_DOT(sum, query, read, e) \
    vec4 q4 = query[e >> 2]; /* e % 4 == 0 */ \
    sum += q4.x * read.x; \
    sum += q4.y * read.y; \
    sum += q4.z * read.z; \
    sum += q4.w * read.w;
#endif

// kv_write.comp's store of cache elements e0 .. e0 + n of `dst` (of
// KV_WORD, KV_DST_ACCESS) from src[off..], invocation i's share: f32, one
// element each (e0 + i); f16, one word each (e0 / 2 + i: n / 2 + 1 of
// them, the most the range can touch), a half outside the range keeping
// its old value. An invocation with no share returns.
#ifdef KV_F16
#define KV_DST_ACCESS
#define KV_WRITE_RANGE(dst, src, off, e0, n, i) \
    uint e1 = e0 + n; \
    uint w = e0 / 2u + i; \
    uint e = 2u * w; \
    bool lo_in = e >= e0 && e < e1; \
    bool hi_in = e + 1u >= e0 && e + 1u < e1; \
    if (!lo_in && !hi_in) { \
        return; \
    } \
    uint old = (lo_in && hi_in) ? 0u : dst[w]; \
    uint lo = lo_in ? f32_to_f16_rne(src[off + (e - e0)]) : (old & 0xffffu); \
    uint hi = hi_in ? f32_to_f16_rne(src[off + (e + 1u - e0)]) : (old >> 16); \
    dst[w] = lo | (hi << 16);
#else
#define KV_DST_ACCESS writeonly
#define KV_WRITE_RANGE(dst, src, off, e0, n, i) \
    if (i >= n) { \
        return; \
    } \
    dst[e0 + i] = src[off + i];
#endif

// The rotated pairs pr[j] (elements of a head, values vals[j], j < count)
// into cache `buf` from element cb, as f32 (each element through F:
// `float` for a float buffer, floatBitsToUint for a word buffer).
#define KV_STORE_F32_PAIRS(buf, cb, pr, vals, count, F) \
    for (uint j = 0u; j < count; j++) { \
        buf[cb + pr[j].x] = F(vals[j].x); \
        buf[cb + pr[j].y] = F(vals[j].y); \
    }
// Two rotated pairs (pr[0], pr[1]: i0 and i0 + 1, i0 even) into an f16
// cache `buf` of words from element cb: whole words (rope.glsl's
// rope_f16_words, which the kernel includes).
#define KV_STORE_F16_PAIRS(buf, cb, pr, vals, neox) \
    uvec2 at; \
    uvec2 words = rope_f16_words(cb, pr[0], pr[1], vec4(vals[0], vals[1]), neox, at); \
    buf[at.x] = words.x; \
    buf[at.y] = words.y;

// The rotated pairs into the cache of the compile-time type (buf of
// KV_WORD; two pairs for an f16 cache).
#ifdef KV_F16
#define KV_STORE_PAIRS(buf, cb, pr, vals, count, neox) KV_STORE_F16_PAIRS(buf, cb, pr, vals, neox)
#else
#define KV_STORE_PAIRS(buf, cb, pr, vals, count, neox) \
    KV_STORE_F32_PAIRS(buf, cb, pr, vals, count, float)
#endif

// Two rotated pairs into the cache of run-time type `code` (buf of u32
// words; KV_CACHE_F32, KV_CACHE_F16; any other code: no write).
#define KV_STORE_PAIRS_BY_CODE(code, buf, cb, pr, vals, neox) \
    if (code == KV_CACHE_F32) { \
        KV_STORE_F32_PAIRS(buf, cb, pr, vals, 2u, floatBitsToUint) \
    } else if (code == KV_CACHE_F16) { \
        KV_STORE_F16_PAIRS(buf, cb, pr, vals, neox) \
    }

// One pair of adjacent elements (y0 at element cb, even, and y1) into the
// cache of run-time type `code` through STORE(word index, word).
#define KV_STORE_PAIR_BY_CODE(code, STORE, cb, y0, y1) \
    if (code == KV_CACHE_F32) { \
        STORE(cb, floatBitsToUint(y0)); \
        STORE(cb + 1u, floatBitsToUint(y1)); \
    } else if (code == KV_CACHE_F16) { \
        STORE(cb / 2u, f32_to_f16_rne(y0) | (f32_to_f16_rne(y1) << 16)); \
    }

#endif
