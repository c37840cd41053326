#!/usr/bin/env bash
# Compiles ggml's CPU kernels from the llama.cpp source llama-cpp-sys-2 0.1.161
# vendors into object files under $1, for scripts/gen-dot-vectors and
# scripts/bench-ggml-dot (see there). Sourced; sets SRC, INC and AVX2.
#   $WORK/avx2-*.o          x86 AVX2 build (llama-cpp-sys-2's flags here)
#   $WORK/base-*-renamed.o  baseline x86-64 build, generic kernels as base_*
WORK=$1
SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/llama-cpp-sys-2-0.1.161/llama.cpp/ggml 2>/dev/null | head -1 || true)
if [ -z "$SRC" ]; then
    say "llama-cpp-sys-2 0.1.161 is not in cargo's registry; fetch it first"
    exit 1
fi
INC="-I$SRC/include -I$SRC/src -I$SRC/src/ggml-cpu -DNDEBUG -D_GNU_SOURCE -w"
AVX2="-O2 -msse4.2 -mf16c -mfma -mbmi2 -mavx -mavx2"
BASE="-O2 -march=x86-64"

say "ggml source: $SRC"
say "compiling the AVX2 build"
for f in ggml-cpu/quants.c ggml-cpu/arch/x86/quants.c; do
    gcc $AVX2 -std=gnu11 $INC -c "$SRC/src/$f" -o "$WORK/avx2-$(echo $f | tr / _).o"
done
# ggml-quants.c (the reference quantizers, Q8_K's among them) belongs to
# ggml-base, which llama-cpp-sys-2 compiles for baseline x86-64: no FMA, so
# no multiply is fused into the rounding add that follows it.
gcc $BASE -std=gnu11 $INC -c "$SRC/src/ggml-quants.c" -o "$WORK/avx2-ggml-quants.c.o"
g++ $AVX2 -std=gnu++17 $INC -c "$SRC/src/ggml-cpu/vec.cpp" -o "$WORK/avx2-vec.o"

say "compiling the baseline build (generic kernels, renamed base_*)"
gcc $BASE -std=gnu11 $INC -c "$SRC/src/ggml-cpu/quants.c" -o "$WORK/base-quants.o"
g++ $BASE -std=gnu++17 $INC -c "$SRC/src/ggml-cpu/vec.cpp" -o "$WORK/base-vec.o"
: >"$WORK/keep"
: >"$WORK/rename"
for t in q4_0_q8_0 q4_1_q8_1 q5_0_q8_0 q5_1_q8_1 q8_0_q8_0 q2_K_q8_K q3_K_q8_K q4_K_q8_K q5_K_q8_K q6_K_q8_K; do
    printf "%s\n" "ggml_vec_dot_${t}_generic" "base_ggml_vec_dot_${t}_generic" >>"$WORK/keep"
    echo "ggml_vec_dot_${t}_generic base_ggml_vec_dot_${t}_generic" >>"$WORK/rename"
done
for t in f32 f16 bf16; do
    printf "%s\n" "ggml_vec_dot_$t" "base_ggml_vec_dot_$t" >>"$WORK/keep"
    echo "ggml_vec_dot_$t base_ggml_vec_dot_$t" >>"$WORK/rename"
done
for o in base-quants base-vec; do
    objcopy --keep-global-symbols="$WORK/keep" --redefine-syms="$WORK/rename" "$WORK/$o.o" "$WORK/$o-renamed.o"
done

