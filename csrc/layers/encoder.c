/* Encoder embedding pieces (encoder.h). */
#include "encoder.h"

void oxl_encoder_embd_add(float *x, const float *type_row, const float *pos_row, int n_embd) {
    if (type_row)
        for (int i = 0; i < n_embd; i++) x[i] += type_row[i];
    if (pos_row)
        for (int i = 0; i < n_embd; i++) x[i] += pos_row[i];
}
