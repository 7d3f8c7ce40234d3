// Bit-compatibility with the torch references: no fused multiply-add contraction in the functions that follow
// the include. Include it after every other header, so that it applies to this file's own code only.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
