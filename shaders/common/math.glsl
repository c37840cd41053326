// Float functions more accurate than some drivers' built-ins.
#ifndef SHARPI_MATH_GLSL
#define SHARPI_MATH_GLSL

// tanh to a few f32 ulps over the whole range. Built-in tanh is often
// (e^2x - 1) / (e^2x + 1), which loses most of its relative precision near 0
// (cancellation): lavapipe's softcap of small inputs was ~1e-6 relative off.
// |x| < 0.25: the odd Taylor series to x^9 (the next term is under 0.2 ulp);
// otherwise 1 - 2 / (e^2|x| + 1), which is 1 for large |x| (e^2|x| = inf).
float tanh_accurate(float x) {
    float ax = abs(x);
    if (ax < 0.25) {
        float x2 = x * x;
        float p = 62.0 / 2835.0;
        p = p * x2 - 17.0 / 315.0;
        p = p * x2 + 2.0 / 15.0;
        p = p * x2 - 1.0 / 3.0;
        return x + x * x2 * p;
    }
    float t = 1.0 - 2.0 / (exp(2.0 * ax) + 1.0);
    return x < 0.0 ? -t : t;
}

#endif
