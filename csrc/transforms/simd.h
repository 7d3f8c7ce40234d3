// Compile-twice helpers of the csrc/transforms kernels: a body written once as an always-inline function is
// instantiated in a baseline function and in one compiled for AVX2 (x86-64 GCC/clang), and the wrapper picks
// one at run time. Elsewhere (aarch64, other compilers) only the baseline exists.
#pragma once

#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define INVFAST_TT_X86 1
#define TT_AVX2 __attribute__((target("avx2")))
#define TT_AVX2_FMA __attribute__((target("avx2,fma")))
#else
#define INVFAST_TT_X86 0
#define TT_AVX2
#define TT_AVX2_FMA
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TT_INLINE inline __attribute__((always_inline))
#else
#define TT_INLINE inline
#endif

// Define name##_avx2 (compiled with `target`) and name##_base around the always-inline body name##_impl.
#define TT_TWICE(target, ret, name, params, args) \
  target static ret name##_avx2 params { return name##_impl args; } \
  static ret name##_base params { return name##_impl args; }

#if INVFAST_TT_X86
#define TT_PICK(name) (::invfast::tt::cpu_has_avx2() ? name##_avx2 : name##_base)
#else
#define TT_PICK(name) (name##_base)
#endif
