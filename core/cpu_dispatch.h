#pragma once
// PW_CPU_CLONES before a function compiles it twice, for x86-64-v4 (AVX-512) and for any x86-64,
// and picks one when the program loads. The build targets plain x86-64; hot loops over 64-bit
// integers or doubles vectorise only with AVX-512. The results are the same bits either way as long
// as the function does only IEEE operations in source order: the build passes -ffp-contract=off
// (GCC would otherwise fuse a * b + c into one rounding in the AVX-512 clone; it did, in Adagrad).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PW_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define PW_CPU_CLONES
#endif
