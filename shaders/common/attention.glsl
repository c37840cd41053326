// Push-constant blocks and f16 helpers of the attention op (kv_write.comp,
// attention.comp). Mirrored by the #[repr(C)] structs in
// engine/src/vulkan/backend/op_attention.rs (sizes checked at compile time).
#ifndef SHARPI_ATTENTION_GLSL
#define SHARPI_ATTENTION_GLSL

// kv_write.comp: cache elements e0..e1 (flat, row-major [n_ctx, width]) of an
// f16 cache = src[src_offset + (e - e0)], rounded to nearest even. One
// invocation per 32-bit word of the cache that the range touches (n_words),
// starting at word e0 / 2; a half outside e0..e1 keeps its old value.
struct KvWritePush {
    uint n_words;
    uint src_offset;
    uint e0;
    uint e1;
};

// attention.comp: one workgroup per (head h = x, row t = y).
// q [T, n_head * head_dim_k] from q_offset, out [T, n_head * head_dim_v] from
// out_offset (elements); K cache [n_ctx, k_width], V cache [n_ctx, v_width].
// window 0 = none; softcap 0 = none.
struct AttnPush {
    uint n_head;
    uint group;      // n_head / n_kv_head
    uint head_dim_k;
    uint head_dim_v;
    uint k_width;
    uint v_width;
    uint pos0;
    uint q_offset;
    uint out_offset;
    uint window;
    float scale;
    float softcap;
};

// f32 -> IEEE half bits, round to nearest even (overflow to infinity, NaN
// kept quiet), independent of the driver's packHalf2x16 rounding.
uint f32_to_f16_rne(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        return sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u);
    }
    if (ax >= 0x477ff000u) {
        return sign | 0x7c00u; // at or past 65520: rounds to infinity
    }
    if (ax >= 0x38800000u) { // normal half
        uint r = ax - 0x38000000u;
        return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
    }
    if (ax < 0x33000000u) {
        return sign; // below 2^-25 (2^-25 itself ties to even 0)
    }
    // Subnormal half: round(|f| * 2^24).
    uint e = ax >> 23;
    uint m = (ax & 0x7fffffu) | 0x800000u;
    uint shift = 126u - e; // 14..24
    return sign | ((m + (1u << (shift - 1u)) - 1u + ((m >> shift) & 1u)) >> shift);
}

#endif
