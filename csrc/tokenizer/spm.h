/* SentencePiece-style BPE ("SPM" in llama.cpp) over a GGUF vocabulary.
 *
 * Encoding starts from the UTF-8 characters of the text and repeatedly merges the adjacent pair whose
 * concatenation is a token with the highest score (ties: the leftmost pair), as llama.cpp's
 * llm_tokenizer_spm does. A final piece that is not a token falls back to its <0xNN> byte tokens, or
 * to the unknown token when the vocabulary lacks one of them. The caller escapes spaces to U+2581.
 *
 * The vocabulary is the GGUF token strings as one UTF-8 buffer cut at offsets; the table keeps
 * pointers into it (the caller keeps it alive) and adds an open-addressing hash of token ids.
 */
#ifndef OXL_TOKENIZER_SPM_H
#define OXL_TOKENIZER_SPM_H

#include <stdint.h>

typedef struct oxl_spm oxl_spm;

#define OXL_SPM_ERR_NOMEM (-1)
#define OXL_SPM_ERR_ARG (-2)
#define OXL_SPM_MAX_TEXT ((int64_t)1 << 30)   /* bytes one encode call takes (positions are int32) */

/* NULL on bad arguments (offsets not rising within data_len, n_vocab < 1) or no memory.
 * byte_fallback: characters without a token become their <0xHH> tokens; unk_id: -1 if none. */
oxl_spm *oxl_spm_new(const uint8_t *data, int64_t data_len, const int64_t *offsets, int32_t n_vocab,
                     const float *scores, int byte_fallback, int32_t unk_id);
void oxl_spm_free(oxl_spm *s);

/* The id of the token whose text is bytes[0:n] (the last such id), or -1. */
int32_t oxl_spm_lookup(const oxl_spm *s, const uint8_t *bytes, int64_t n);

/* Encode text[0:len] into out (room for cap ids). Returns the number of ids; if that is more than
 * cap, only the first cap were written and the caller retries with a larger buffer (never more than
 * len ids). Negative: OXL_SPM_ERR_* (ARG also for a text longer than OXL_SPM_MAX_TEXT). Thread-safe:
 * the table is read-only after oxl_spm_new. */
int64_t oxl_spm_encode(const oxl_spm *s, const uint8_t *text, int64_t len, int32_t *out, int64_t cap);

#endif
