// Sums of f32 values as unevaluated pairs hi + lo (2Sum keeps each addition's
// rounding error in lo): close to an f64 sum rounded once, without float64.
// Used by the row reductions (softmax, normalize_rows).
#ifndef SHARPI_PAIRSUM_GLSL
#define SHARPI_PAIRSUM_GLSL

// (hi, lo) += v.
void pair_add(inout float hi, inout float lo, float v) {
    precise float s = hi + v;
    precise float bb = s - hi;
    precise float e = (hi - (s - bb)) + (v - bb);
    hi = s;
    lo = lo + e;
}

#endif
