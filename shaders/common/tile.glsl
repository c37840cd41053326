// The workgroup geometry, bindings and output of the tiled prefill matmuls
// (matmul_tiled.comp, matmul_tiled_k.comp): workgroup (x, y) computes TM
// weight rows by TN tokens, invocation (tr, tt) rows tr + i * LR (i < RM)
// with tokens tt + j * LT (j < RT), its sums in acc[i * RT + j].
// Bindings: 0 = weight chunk (uint words), 1 = x (activation blocks, u32
// words), 2 = out. Push: WeightPush (x_offset and the row stride of x count
// words). The including shader defines TM, TN, RM and RT (its variants:
// engine/build/variants.rs) and includes weights.glsl first.
#ifndef SHARPI_TILE_GLSL
#define SHARPI_TILE_GLSL

#define LR (TM / RM)     // row lanes
#define LT (TN / RT)     // token lanes
#define WG (LR * LT)
layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Wt { uint W[]; };
layout(set = 0, binding = 1, std430) readonly buffer At { uint A[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Ot { float O[]; };
layout(push_constant) uniform Push { WeightPush p; };

// This invocation's row lane, token lane, and the workgroup's first row and
// token.
uint tile_tr() {
    return gl_LocalInvocationID.x % uint(LR);
}

uint tile_tt() {
    return gl_LocalInvocationID.x / uint(LR);
}

uint tile_r0() {
    return gl_WorkGroupID.x * uint(TM);
}

uint tile_t0() {
    return gl_WorkGroupID.y * uint(TN);
}

// The invocation's sums to out[t, col0 + r], rows and tokens past the
// chunk left out.
void tile_store(float acc[RM * RT]) {
    uint tr = tile_tr();
    uint tt = tile_tt();
    for (uint j = 0u; j < uint(RT); j++) {
        uint t = tile_t0() + tt + j * uint(LT);
        if (t < p.n_tok) {
            uint o = p.out_offset + t * p.n_out + p.col0;
            for (uint i = 0u; i < uint(RM); i++) {
                uint r = tile_r0() + tr + i * uint(LR);
                if (r < p.rows) {
                    O[o + r] = acc[i * uint(RT) + j];
                }
            }
        }
    }
}

#endif
