// Push-constant blocks and softmax helpers of the attention op
// (kv_write.comp, attention.comp). Mirrored by the #[repr(C)] structs in
// engine/src/vulkan/backend/op_attention.rs (sizes checked at compile time).
#ifndef SHARPI_ATTENTION_GLSL
#define SHARPI_ATTENTION_GLSL

#include "math.glsl"
#include "kv.glsl"

// kv_write.comp: `rows` rows of `width` elements from src[src_offset..] into
// the cache (row-major [n_ctx, width]) at position step_words[pos_at], so
// cache elements e0 = pos * width .. e1 = e0 + rows * width, as kv.glsl's
// KV_WRITE_RANGE stores the cache's element type. f32 cache: one
// invocation per element. f16 cache (KV_F16): rounded to nearest even, one
// invocation per 32-bit word from word e0 / 2 (rows * width / 2 + 1 of them,
// the most the range can touch); a half outside e0..e1 keeps its old value.
struct KvWritePush {
    uint rows;
    uint width;
    uint src_offset;
    uint pos_at;
};

// attention.comp: one workgroup per (head h = x, row t = y);
// attention_cpu.comp: one invocation per (row t = x, head h = y).
// q [T, n_head * head_dim_k] from q_offset, out [T, n_head * head_dim_v] from
// out_offset (elements); K cache [n_ctx, k_width], V cache [n_ctx, v_width].
// window 0 = none; softcap 0 = none. The cache's elements and the query
// element as the products with them take it (Q_IN): kv.glsl.

// The running max of the online softmax (m) starts at MAX_START and a new
// one is RUNNING_MAX(m_new). FAULT_SOFTMAX_UNSHIFTED (only in the variants
// of the fault-injection feature: the `unshifted` twins of
// engine/build/variants.rs, fault `gpu-softmax-unshifted`) holds it at 0: exp(s) unshifted, the same
// numbers while the scores are small, inf / NaN once one passes ~88.7.
#ifdef FAULT_SOFTMAX_UNSHIFTED
#define MAX_START 0.0
#define RUNNING_MAX(m_new) 0.0
#else
#define MAX_START uintBitsToFloat(0xff800000u)
#define RUNNING_MAX(m_new) (m_new)
#endif

// The first position a query at `pos` sees under a sliding window of
// `window` positions (0: none).
uint first_seen(uint pos, uint window) {
    return (window == 0u || pos + 1u <= window) ? 0u : pos + 1u - window;
}

struct AttnPush {
    uint n_head;
    uint group;      // n_head / n_kv_head
    uint head_dim_k;
    uint head_dim_v;
    uint k_width;
    uint v_width;
    uint pos_at;     // the first row's position: step_words[pos_at]
    uint q_offset;
    uint out_offset;
    uint window;
    float scale;
    float softcap;
    uint n_rows;     // T
};

#endif
