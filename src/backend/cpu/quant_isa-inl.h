// What the integer kernel files (quant_dot.cpp, quant_groups.cpp) share for each target:
// which x86 instructions a target may use (TESSERA_QUANT_DOT_AVX2: AVX2's byte instructions;
// TESSERA_QUANT_DOT_VNNI: AVX-512 with VNNI, whose functions say so with TESSERA_VNNI), and
// small loads. Highway's per-target header pattern (as widen-inl.h): included once per
// target from inside foreach_target.h's loop, after hwy/highway.h.
#if defined(TESSERA_BACKEND_CPU_QUANT_ISA_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TESSERA_BACKEND_CPU_QUANT_ISA_INL_H_
#undef TESSERA_BACKEND_CPU_QUANT_ISA_INL_H_
#else
#define TESSERA_BACKEND_CPU_QUANT_ISA_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "hwy/highway.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {

#undef TESSERA_QUANT_DOT_AVX2
#undef TESSERA_QUANT_DOT_VNNI
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define TESSERA_QUANT_DOT_AVX2 1
#else
#define TESSERA_QUANT_DOT_AVX2 0
#endif
#undef TESSERA_VNNI
#undef TESSERA_VNNI_GFNI
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
#define TESSERA_QUANT_DOT_VNNI 1
// Highway's AVX3_DL target implies AVX512_VNNI at run time but does not name it: the
// functions that use it (and those they are inlined into) name it themselves.
#define TESSERA_VNNI __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
// The same with GFNI, which AVX3_DL does not imply in Highway 1.0: functions with it run
// only where __builtin_cpu_supports("gfni") (dot_rows_one_token).
#define TESSERA_VNNI_GFNI __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,gfni")))
#else
#define TESSERA_QUANT_DOT_VNNI 0
#define TESSERA_VNNI
#endif

HWY_INLINE float f16_at(const uint8_t* p) {
  const auto bits = static_cast<uint16_t>(p[0] | p[1] << 8);
#if TESSERA_QUANT_DOT_AVX2
  return _cvtsh_ss(bits);  // F16C: exact, as f16_to_f32
#else
  return f16_to_f32(bits);
#endif
}

#if TESSERA_QUANT_DOT_AVX2
HWY_INLINE __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
#endif

// Decode waits on memory although each row is a sequential stream (perf put most of Q6_K's
// samples on each unit's first load), so its kernels ask for the bytes kPrefetchAhead on in
// every row in advance (docs/benchmarks.md has the figures). A hint only: no result changes,
// and a prefetch past the end of the weights does not fault.
constexpr size_t kPrefetchAhead = 2048;

}  // namespace HWY_NAMESPACE
}  // namespace tessera::cpu
HWY_AFTER_NAMESPACE();

#endif  // TESSERA_BACKEND_CPU_QUANT_ISA_INL_H_
