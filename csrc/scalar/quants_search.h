/* ggml's scalar search helpers shared by the reference quantizers (quants_k.c) and the
 * importance-weighted ones (quants_weighted.c). Included by C files that turn off FP contraction,
 * so both compile them with the same rounding. */
#ifndef OXL_QUANTS_SEARCH_H
#define OXL_QUANTS_SEARCH_H

#include <math.h>
#include <string.h>

#include "../blocks.h"

#define GROUP_MAX_EPS 1e-15f

/* round to nearest, ties to even, via the 1.5*2^23 trick; exact for |f| <= 2^22 */
static inline int nearest_int(float f) {
    const float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* ---------------------------------------------------------------- search helpers (ggml's) */

/* Symmetric n-value quantization of x to L in [0, 2*nmax) (offset +nmax), weighted least squares
 * over 19 candidate scales. rmse_type 1: weights x^2. Returns the scale. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = OXL_MAX(-nmax, OXL_MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = OXL_MAX(-nmax, OXL_MIN(nmax - 1, l));
            const float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + OXL_MAX(-nmax, OXL_MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

#endif
