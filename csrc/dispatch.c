/* Run-time dispatch: fill one kernel table per tier, pick the highest usable one. */
#include <stdlib.h>

#include "kernels.h"

static oxl_kernel_table g_tables[OXL_TIER_COUNT];
static int g_usable[OXL_TIER_COUNT];
static int g_active = OXL_TIER_SCALAR;
static uint32_t g_features;
static int g_initialized;

static const char *const g_tier_names[OXL_TIER_COUNT] = {
    "scalar", "avx2", "avx512", "avx512vnni", "neon", "dotprod",
};

#define AVX2_REQ (OXL_CPU_AVX | OXL_CPU_AVX2 | OXL_CPU_FMA | OXL_CPU_F16C | OXL_CPU_BMI2)
#define AVX512_REQ (AVX2_REQ | OXL_CPU_AVX512F | OXL_CPU_AVX512BW | OXL_CPU_AVX512VL | OXL_CPU_AVX512DQ)

/* Per tier: features it needs, the tier it extends, its register function (NULL if not built), and
 * kernels registered for it from another tier's folder after the pairing rule below has run. */
static const struct {
    uint32_t required;
    int parent;
    void (*register_fn)(oxl_kernel_table *);
    void (*adopt_fn)(oxl_kernel_table *);
} g_tier_specs[OXL_TIER_COUNT] = {
    [OXL_TIER_SCALAR] = {0, -1, oxl_register_scalar},
#if OXL_HAVE_TIER_AVX2
    [OXL_TIER_AVX2] = {AVX2_REQ, OXL_TIER_SCALAR, oxl_register_avx2},
#endif
#if OXL_HAVE_TIER_AVX512
    [OXL_TIER_AVX512] = {AVX512_REQ, OXL_TIER_AVX2, oxl_register_avx512, oxl_register_avx512_gemm},
#endif
#if OXL_HAVE_TIER_AVX512VNNI
    [OXL_TIER_AVX512VNNI] = {AVX512_REQ | OXL_CPU_AVX512VNNI, OXL_TIER_AVX512, oxl_register_avx512vnni},
#endif
#if OXL_HAVE_TIER_NEON
    [OXL_TIER_NEON] = {OXL_CPU_NEON, OXL_TIER_SCALAR, oxl_register_neon},
#endif
#if OXL_HAVE_TIER_DOTPROD
    [OXL_TIER_DOTPROD] = {OXL_CPU_NEON | OXL_CPU_DOTPROD, OXL_TIER_NEON, oxl_register_dotprod},
#endif
};

/* Names accepted in OXILLAMA_DISABLE_CPU_FEATURES: tier names and feature names. */
static uint32_t feature_mask_for(const char *name, size_t len) {
    static const struct { const char *name; uint32_t mask; } aliases[] = {
        {"avx2", OXL_CPU_AVX2}, {"avx512", OXL_CPU_AVX512F}, {"avx512vnni", OXL_CPU_AVX512VNNI},
        {"neon", OXL_CPU_NEON}, {"dotprod", OXL_CPU_DOTPROD}, {"fma", OXL_CPU_FMA},
        {"f16c", OXL_CPU_F16C}, {"avx", OXL_CPU_AVX}, {"avx512f", OXL_CPU_AVX512F},
        {"avx512bw", OXL_CPU_AVX512BW}, {"avx512vl", OXL_CPU_AVX512VL}, {"avx512dq", OXL_CPU_AVX512DQ},
    };
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
        if (strlen(aliases[i].name) == len && strncmp(aliases[i].name, name, len) == 0) return aliases[i].mask;
    }
    return 0;
}

static uint32_t parse_disabled(const char *s) {
    uint32_t mask = 0;
    while (s && *s) {
        while (*s == ',' || *s == ' ') s++;
        const char *start = s;
        while (*s && *s != ',' && *s != ' ') s++;
        if (s > start) mask |= feature_mask_for(start, (size_t)(s - start));
    }
    return mask;
}

void oxl_dispatch_init(const char *disabled) {
    g_features = oxl_cpu_detect();
    const uint32_t usable_features = g_features & ~parse_disabled(disabled);
    memset(g_usable, 0, sizeof(g_usable));
    g_active = OXL_TIER_SCALAR;
    for (int t = 0; t < OXL_TIER_COUNT; t++) {
        if (!g_tier_specs[t].register_fn) continue;
        const int parent = g_tier_specs[t].parent;
        if (parent >= 0 && !g_usable[parent] && parent != OXL_TIER_SCALAR) continue;
        if ((g_tier_specs[t].required & g_features) != g_tier_specs[t].required) continue;
        oxl_kernel_table *tab = &g_tables[t];
        if (parent >= 0) {
            *tab = g_tables[parent];
        } else {
            memset(tab, 0, sizeof(*tab));
        }
        g_tier_specs[t].register_fn(tab);
        /* A multi-row kernel sums each output exactly as the vec_dot beside it (kernels.h): a tier that
         * brings its own vec_dot for a type but no gemm loses the inherited gemm, and matmul runs its
         * vec_dot per output, so a token's logits never depend on the batch it is computed in. */
        for (int ty = 0; ty < OXL_TYPE_COUNT && parent >= 0; ty++) {
            const oxl_type_traits *pt = &g_tables[parent].type[ty];
            if (tab->type[ty].vec_dot != pt->vec_dot && tab->type[ty].gemm == pt->gemm) {
                tab->type[ty].gemm = NULL;
                tab->type[ty].gemm_one_row = 0;
            }
            if (tab->type[ty].vec_dot != pt->vec_dot && tab->type[ty].repacked.gemm == pt->repacked.gemm)
                memset(&tab->type[ty].repacked, 0, sizeof(tab->type[ty].repacked));
        }
        if (g_tier_specs[t].adopt_fn) g_tier_specs[t].adopt_fn(tab);
        tab->name = g_tier_names[t];
        /* a vec_dot that differs from the parent's is this tier's own */
        for (int ty = 0; ty < OXL_TYPE_COUNT; ty++) {
            if (parent < 0 || tab->type[ty].vec_dot != g_tables[parent].type[ty].vec_dot)
                tab->type[ty].tier = g_tier_names[t];
        }
        g_usable[t] = 1;
        if ((g_tier_specs[t].required & usable_features) == g_tier_specs[t].required) g_active = t;
    }
    g_initialized = 1;
}

static void ensure_init(void) {
    if (!g_initialized) oxl_dispatch_init(getenv("OXILLAMA_DISABLE_CPU_FEATURES"));
}

const oxl_kernel_table *oxl_kernels(void) { ensure_init(); return &g_tables[g_active]; }

const oxl_kernel_table *oxl_tier_table(int tier) {
    ensure_init();
    if (tier < 0 || tier >= OXL_TIER_COUNT || !g_usable[tier]) return NULL;
    return &g_tables[tier];
}

int oxl_active_tier(void) { ensure_init(); return g_active; }
uint32_t oxl_cpu_features(void) { ensure_init(); return g_features; }

const char *oxl_tier_name(int tier) {
    return (tier >= 0 && tier < OXL_TIER_COUNT) ? g_tier_names[tier] : NULL;
}

int oxl_tier_compiled(int tier) {
    return tier >= 0 && tier < OXL_TIER_COUNT && g_tier_specs[tier].register_fn != NULL;
}

const oxl_type_traits *oxl_type_info(int type) {
    ensure_init();
    if (type < 0 || type >= OXL_TYPE_COUNT || g_tables[OXL_TIER_SCALAR].type[type].name == NULL) return NULL;
    return &g_tables[OXL_TIER_SCALAR].type[type];
}

int64_t oxl_row_size(int type, int64_t n) {
    const oxl_type_traits *t = oxl_type_info(type);
    if (!t || n < 0 || n % t->blck_size != 0) return -1;
    return (n / t->blck_size) * (int64_t)t->type_size;
}
