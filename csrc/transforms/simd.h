// Compile-twice helpers of the csrc/transforms kernels: a body written once as an always-inline function is
// instantiated in a baseline function and in one compiled for AVX2 (x86-64 GCC/clang), and the wrapper picks
// one at run time by the core's one policy (common/cpu_isa.h). Elsewhere (aarch64, other compilers) only the
// baseline exists.
#pragma once

#include <cstdint>

#include "common/cpu_isa.h"

#define INVFAST_TT_X86 INVFAST_X86
#define TT_AVX2 INVFAST_TARGET("avx2")
#define TT_AVX2_FMA INVFAST_TARGET("avx2,fma")
#define TT_INLINE INVFAST_ALWAYS_INLINE

// Define name##_avx2 (compiled with `target`) and name##_base around the always-inline body name##_impl.
#define TT_TWICE(target, ret, name, params, args) \
  target static ret name##_avx2 params { return name##_impl args; } \
  static ret name##_base params { return name##_impl args; }

#if INVFAST_TT_X86
#define TT_PICK(name) (::invfast::cpu_isa_at_least(::invfast::CpuIsa::kAvx2) ? name##_avx2 : name##_base)
#else
#define TT_PICK(name) (name##_base)
#endif
