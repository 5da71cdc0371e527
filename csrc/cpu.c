/* CPU feature detection: CPUID plus the OS-support check (XCR0) on x86, HWCAP/sysctl on ARM.
 * A feature counts only when the CPU has it and the OS saves its registers on context switch. */
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#include <cpuid.h>

static uint64_t read_xcr0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

uint32_t oxl_cpu_detect(void) {
    uint32_t a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int has_osxsave = (c >> 27) & 1;
    const int has_avx = (c >> 28) & 1, has_fma = (c >> 12) & 1, has_f16c = (c >> 29) & 1;
    if (c & 1) f |= OXL_CPU_SSE3;
    uint64_t xcr0 = has_osxsave ? read_xcr0() : 0;
    const int os_ymm = (xcr0 & 0x6) == 0x6;           /* XMM and YMM state */
    const int os_zmm = (xcr0 & 0xe6) == 0xe6;         /* + opmask, ZMM_Hi256, Hi16_ZMM */
    if (!os_ymm) return f;
    if (has_avx) f |= OXL_CPU_AVX;
    if (has_fma) f |= OXL_CPU_FMA;
    if (has_f16c) f |= OXL_CPU_F16C;
    if (__get_cpuid_max(0, NULL) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    if ((b >> 5) & 1) f |= OXL_CPU_AVX2;
    if ((b >> 8) & 1) f |= OXL_CPU_BMI2;
    if (os_zmm) {
        if ((b >> 16) & 1) f |= OXL_CPU_AVX512F;
        if ((b >> 17) & 1) f |= OXL_CPU_AVX512DQ;
        if ((b >> 30) & 1) f |= OXL_CPU_AVX512BW;
        if ((b >> 31) & 1) f |= OXL_CPU_AVX512VL;
        if ((c >> 11) & 1) f |= OXL_CPU_AVX512VNNI;
    }
    __cpuid_count(7, 1, a, b, c, d);
    if ((a >> 4) & 1) f |= OXL_CPU_AVXVNNI;
    if (os_zmm && ((a >> 5) & 1)) f |= OXL_CPU_AVX512BF16;
    return f;
}

#elif defined(__aarch64__) || defined(_M_ARM64)

#if defined(__APPLE__)
#include <sys/sysctl.h>
static int sysctl_flag(const char *name) {
    int v = 0;
    size_t len = sizeof(v);
    if (sysctlbyname(name, &v, &len, NULL, 0) != 0) return 0;
    return v != 0;
}
uint32_t oxl_cpu_detect(void) {
    uint32_t f = OXL_CPU_NEON;
    if (sysctl_flag("hw.optional.arm.FEAT_DotProd")) f |= OXL_CPU_DOTPROD;
    if (sysctl_flag("hw.optional.arm.FEAT_FP16")) f |= OXL_CPU_FP16;
    if (sysctl_flag("hw.optional.arm.FEAT_I8MM")) f |= OXL_CPU_I8MM;
    return f;
}
#elif defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP_ASIMDHP
#define HWCAP_ASIMDHP (1 << 10)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
uint32_t oxl_cpu_detect(void) {
    uint32_t f = OXL_CPU_NEON;
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    if (hw & HWCAP_ASIMDDP) f |= OXL_CPU_DOTPROD;
    if (hw & HWCAP_ASIMDHP) f |= OXL_CPU_FP16;
    if (hw2 & HWCAP2_I8MM) f |= OXL_CPU_I8MM;
    return f;
}
#else
uint32_t oxl_cpu_detect(void) { return OXL_CPU_NEON; }
#endif

#else
uint32_t oxl_cpu_detect(void) { return 0; }
#endif

const char *oxl_cpu_feature_name(int bit) {
    switch (1u << bit) {
    case OXL_CPU_SSE3: return "sse3";
    case OXL_CPU_AVX: return "avx";
    case OXL_CPU_AVX2: return "avx2";
    case OXL_CPU_FMA: return "fma";
    case OXL_CPU_F16C: return "f16c";
    case OXL_CPU_AVX512F: return "avx512f";
    case OXL_CPU_AVX512BW: return "avx512bw";
    case OXL_CPU_AVX512VL: return "avx512vl";
    case OXL_CPU_AVX512DQ: return "avx512dq";
    case OXL_CPU_AVX512VNNI: return "avx512vnni";
    case OXL_CPU_AVXVNNI: return "avxvnni";
    case OXL_CPU_AVX512BF16: return "avx512bf16";
    case OXL_CPU_BMI2: return "bmi2";
    case OXL_CPU_NEON: return "neon";
    case OXL_CPU_DOTPROD: return "dotprod";
    case OXL_CPU_FP16: return "fp16";
    case OXL_CPU_I8MM: return "i8mm";
    default: return NULL;
    }
}
