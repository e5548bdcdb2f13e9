/* readers: model files (llama2.c checkpoints, Hugging Face folders, GGUF) read into one in-memory
 * model (imp_model) that the exporter (export/) writes as a program. Used at export time: the
 * runtime's path from a program to tokens calls none of it, though one libetch holds both. */
#ifndef ETCH_READER_H
#define ETCH_READER_H

#include "../base/base.h"
#include "../tokenizer/tokenizer.h"

/* Source element types of a tensor. */
enum { IMP_F32 = 0, IMP_F16 = 1, IMP_BF16 = 2, IMP_Q8_0 = 3, IMP_Q4_0 = 4, IMP_Q4_1 = 5, IMP_Q5_0 = 6, IMP_Q5_1 = 7,
       IMP_Q4_K = 8, IMP_Q5_K = 9, IMP_Q6_K = 10, IMP_IQ4_NL = 11, IMP_IQ4_XS = 12 };

typedef struct imp_tensor {
    char name[96];       /* the program's name (GGUF style: blk.N.attn_q.weight) */
    uint32_t ndim;
    uint64_t dims[2];    /* [rows, cols] or [n] */
    int src_type;        /* IMP_* */
    const void *data;    /* borrowed: from a mapping or a buffer the model owns */
    int matrix;          /* 1: stored in the program's dtype; 0: a norm or a bias, stored f32 */
} imp_tensor;

/* A model between import and export. */
typedef struct imp_model {
    /* architecture */
    char model_type[32];     /* "llama", "mistral", "qwen2", "qwen3", "gemma3": what the source called it */
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim, vocab_size, context_len;
    float norm_eps, rope_base;
    const char *rope_style;  /* "adjacent" | "half" */
    int32_t tied_embeddings, qkv_bias, qk_norm;
    int32_t rope_llama3;     /* Llama 3 rope scaling with the four values below */
    float rs_factor, rs_low, rs_high, rs_orig;
    float rope_linear;       /* 0, or linear RoPE scaling: positions divided by this (full-attention layers) */
    float *rope_freq_factors; /* owned [head_dim / 2] or NULL: GGUF's rope_freqs.weight, each frequency divided by
                              * its factor (how llama.cpp's converter writes Llama 3 scaling) */
    /* Gemma-3 and sliding windows */
    int32_t gelu;            /* the gate's activation is GELU (tanh approximation), not SiLU */
    int32_t post_norms;      /* norms after attention and after the feed-forward */
    int32_t norm_plus_one;   /* the source stores RMSNorm weights as w for a scale of (1 + w) (Hugging Face Gemma) */
    float embd_scale;        /* 0, or the factor embeddings are multiplied by */
    float query_pre_attn_scalar; /* 0, or scores are q.k / sqrt(this) instead of / sqrt(head_dim) */
    float final_softcap;     /* 0, or the final logits' soft cap */
    float rope_base_local;   /* 0, or the RoPE base of windowed layers */
    int32_t *layer_window;   /* owned [n_layers] or NULL: each layer's sliding window, 0 for full attention */
    int source_dtype;        /* IMP_*: the dtype a program gets when export asks for none */
    /* tokenizer: pieces raw (a space is ' '), one of two rankings */
    int tok_model;           /* TOK_MODEL_SCORES | TOK_MODEL_MERGES */
    char *tok_blob;          /* owned, all pieces concatenated */
    uint64_t tok_blob_size;
    int32_t *tok_offsets;    /* owned [vocab_size + 1] */
    float *tok_scores;       /* owned [vocab_size] (TOK_MODEL_SCORES) */
    uint8_t *tok_types;      /* owned [vocab_size] */
    int32_t *tok_merges;     /* owned [n_merges * 3] (TOK_MODEL_MERGES) */
    int32_t tok_n_merges;
    char *tok_pretok;        /* owned split regex or NULL */
    int32_t tok_byte_level, tok_byte_fallback, tok_ignore_merges, tok_match_added, tok_nfc;
    int32_t bos_id, unk_id, add_dummy_prefix;
    int32_t eos_ids[16], n_eos;
    char chat_template[32];  /* "" (none), "chatml", "qwen3", "llama3", "llama2", "?" (unrecognized) */
    char *chat_jinja;        /* owned: the template's Jinja text when the source had one */
    /* weights */
    imp_tensor *tensors;     /* owned [n_tensors] */
    int32_t n_tensors, cap_tensors;
    base_map maps[64];       /* mappings the tensors borrow from */
    int n_maps;
    void **owned;            /* buffers to free with the model */
    int n_owned, cap_owned;
    char source[512];        /* where it came from, for the program's metadata */
} imp_model;

void imp_model_free(imp_model *m);
/* Adds a tensor (borrowing data). Returns NULL on allocation failure. */
imp_tensor *imp_add_tensor(imp_model *m, const char *name, int src_type, const void *data, uint64_t rows,
                           uint64_t cols, int matrix);
/* Element i of a tensor as f32 (GGML's block types dequantized as GGML does). */
float imp_tensor_at(const imp_tensor *t, size_t i);
/* GGML's block types hold every weight as an integer q with a scale per group of a row, and for some
 * a min: weight = q * scale + min. imp_int_group is the group size (32; Q6_K 16: its scale is d times
 * the sub-block's), 0 for the other types; imp_int_has_min says whether the type has mins (Q4_1, Q5_1,
 * Q4_K, Q5_K). q * scale is exact in f32 for all of them (the products fit in 24 bits). */
int imp_int_group(int src_type);
int imp_int_has_min(int src_type);
/* The K-quants (Q4_K, Q5_K, Q6_K) and IQ4_XS scale a group by an f16 per 256 weights times the group's
 * small integer: the groups that share one f16 (8, Q6_K 16), or 0 for the types with one f16 per group. */
int imp_sub_groups(int src_type);
typedef struct imp_qweight {
    int q;                      /* Q8_0 -128..127, Q4_0 -8..7, Q5_0 -16..15, Q6_K -32..31, IQ4_NL and IQ4_XS
                                 * -127..113 (the table's entry); Q4_1, Q4_K 0..15; Q5_1, Q5_K 0..31 */
    float scale, min;           /* the group's; min 0 without mins (Q4_K's: -(dmin * sub-block min)) */
    int32_t scale_f16, min_f16; /* their f16 bits where the type stores each as one f16, else -1 */
    int32_t d_f16, dmin_f16;    /* imp_sub_groups > 0: the f16 bits of the block's d and dmin (-1 without mins) */
    int sub, sub_min;           /* ... and the group's integers: scale = d * sub, min = dmin * sub_min (as a
                                 * value; -(dmin * -sub_min) where the sign of a zero counts) */
} imp_qweight;
/* Weight i of a tensor of a block type (imp_int_group > 0), taken apart. */
void imp_qweight_at(const imp_tensor *t, size_t i, imp_qweight *w);
/* The tensor's n values widened to f32 (n = rows * cols). */
void imp_tensor_f32(const imp_tensor *t, float *out);
/* Sets the sliding window of every layer: windowed iff is_windowed[l] (NULL: all). 0 on allocation failure. */
int imp_set_windows(imp_model *m, int32_t window, const uint8_t *is_windowed);
/* Takes ownership of a malloc'ed buffer (freed with the model). Returns p, or NULL (and frees p). */
void *imp_own(imp_model *m, void *p);

/* llama2.c checkpoint (legacy version 0 header) and tokenizer.bin. */
etch_status imp_llama2c(const char *model_path, const char *tokenizer_path, imp_model *m, etch_error *err);
/* A Hugging Face folder: config.json, model.safetensors (or sharded), tokenizer.json,
 * tokenizer_config.json, generation_config.json. */
etch_status imp_hf(const char *dir, imp_model *m, etch_error *err);
/* Only config.json of a Hugging Face folder, checked and read (m is freed again): for the fuzzer. */
etch_status imp_hf_config(const char *dir, imp_model *m, etch_error *err);
/* One safetensors file on its own (Llama names), its tensors borrowed from its mapping. */
etch_status imp_safetensors(const char *path, imp_model *m, etch_error *err);
/* Only the tokenizer of a Hugging Face folder or tokenizer.json (+ tokenizer_config.json beside it). */
etch_status imp_hf_tokenizer(const char *path, imp_model *m, etch_error *err);
/* A GGUF file (version 2 or 3). With tokenizer_only, the weights are not read. */
etch_status imp_gguf(const char *path, imp_model *m, int tokenizer_only, etch_error *err);

/* Split regexes by the names llama.cpp gives them in tokenizer.ggml.pre. */
extern const char imp_regex_gpt2[];   /* GPT-2 (ByteLevel's own regex) */
extern const char imp_regex_digits[]; /* GPT-2's after Digits(individual_digits): SmolLM */
extern const char imp_regex_qwen2[];  /* Qwen2 and Qwen3 */
extern const char imp_regex_llama3[]; /* Llama 3 */

/* The raw bytes a vocabulary string stands for: byte-level pieces through GPT-2's alphabet,
 * SentencePiece pieces with U+2581 as a space. out holds n bytes. Returns 0 when a byte-level piece
 * has a character outside the alphabet (or the text is not UTF-8). */
int imp_raw_piece(const char *s, size_t n, int byte_level, char *out, size_t *len);

/* The tokenizer spec of m (views into m). */
void imp_tok_spec(const imp_model *m, tok_spec *s);
/* Recognizes a Jinja chat template by its markers: "qwen3", "chatml", "llama3", "llama2" or "gemma"; "" when
 * jinja is NULL or empty; NULL when it is a template none of these (the exporter then asks for
 * --chat-template). */
const char *imp_recognize_template(const char *jinja);

#endif
