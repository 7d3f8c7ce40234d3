// The one CPU instruction-set policy of the compiled core. Every kernel compiled in more than one variant
// (csrc/transforms, augment, invariance, pairwise, units, hyper) asks cpu_isa_at_least() which one to run;
// none asks the CPU or the environment itself. Torch-free: the transforms kernels include it.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define INVFAST_X86 1
#define INVFAST_TARGET(isa) __attribute__((target(isa)))
#else
#define INVFAST_X86 0
#define INVFAST_TARGET(isa)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define INVFAST_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define INVFAST_ALWAYS_INLINE inline
#endif

// the target of the kAvx2 builds that may contract to FMA (x86-64-v3)
#define INVFAST_V3 INVFAST_TARGET("arch=x86-64-v3")

// From the always-inline body name##_impl, defines name##_isa compiled for `target` (an INVFAST_TARGET),
// name##_base compiled for the baseline, and name, which runs the first where cpu_isa_at_least(level).
// `tmpl` is empty or a one-parameter template header; the template argument is deduced from `args`.
#define INVFAST_ISA_TWICE(tmpl, level, target, ret, name, params, args)                 \
  tmpl target ret name##_isa params { return name##_impl args; }                       \
  tmpl ret name##_base params { return name##_impl args; }                              \
  tmpl ret name params {                                                                \
    return ::invfast::cpu_isa_at_least(level) ? name##_isa args : name##_base args;    \
  }

namespace invfast {

// Levels, each implying the one below: kAvx2 is x86-64-v3 (AVX2, FMA, F16C, BMI1/2, ...), kAvx512 is
// x86-64-v4 (AVX-512 F, BW, CD, DQ, VL, on top of v3). Only kBaseline exists off x86-64.
enum class CpuIsa : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The highest level the kernels use in this process: what the CPU supports, lowered (never raised) by the
// environment variable INVFAST_CPU_ISA = baseline | avx2 | avx512, read once at the first call. An unknown
// value is ignored here; invfast's loader refuses it before the core is imported.
CpuIsa cpu_isa();

inline bool cpu_isa_at_least(CpuIsa level) { return static_cast<int>(cpu_isa()) >= static_cast<int>(level); }

// "baseline", "avx2" or "avx512"
const char* cpu_isa_name(CpuIsa level);

// What the CPU supports, ignoring INVFAST_CPU_ISA.
CpuIsa cpu_isa_supported();

}  // namespace invfast
