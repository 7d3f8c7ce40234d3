#include "common/cpu_isa.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace invfast {

CpuIsa cpu_isa_supported() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const CpuIsa level = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("x86-64-v3")) return CpuIsa::kBaseline;
    return __builtin_cpu_supports("x86-64-v4") ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
  }();
  return level;
#else
  return CpuIsa::kBaseline;
#endif
}

const char* cpu_isa_name(CpuIsa level) {
  switch (level) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    default: return "baseline";
  }
}

CpuIsa cpu_isa() {
  static const CpuIsa level = [] {
    const CpuIsa hw = cpu_isa_supported();
    const char* cap = std::getenv("INVFAST_CPU_ISA");
    if (cap == nullptr) return hw;
    for (CpuIsa l : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (std::strcmp(cap, cpu_isa_name(l)) == 0) return static_cast<int>(l) < static_cast<int>(hw) ? l : hw;
    }
    return hw;
  }();
  return level;
}

}  // namespace invfast
