/* Encoder (bert, nomic-bert) pieces of the forward: the embedding sum and the bidirectional attention span.
 *
 * Embeddings: x = tok_embd[token] + type_embd (the token-type-0 row, "sentence A", as llama.cpp hard-codes it)
 * + pos_embd[pos] (bert's learned absolute positions; nomic-bert has RoPE instead), summed in that order, then
 * a norm with embd_norm (LayerNorm, weight and bias). Blocks are post-norm (forward.h: attn_out_norm,
 * layer_out_norm). Attention is not causal: a token attends to every position of its sequence up to the last
 * token of the call, so an encoder's input must arrive in one call (the runtime's embeddings do that); its
 * hidden states then depend on the whole input, and on nothing else (not the batch, not the thread count). */
#ifndef OXL_LAYERS_ENCODER_H
#define OXL_LAYERS_ENCODER_H

#include <stdint.h>

/* x (n_embd) += type_row (or NULL) then += the float row pos_row (or NULL) */
void oxl_encoder_embd_add(float *x, const float *type_row, const float *pos_row, int n_embd);

#endif
