/* etch.h - the one public header of etch, a C11 runtime for causal language models on a CPU.
 *
 * If it is not in this header, it is not API.
 *
 * Model of use:
 *   export (ahead of time)  : etch_export_llama2c(...)          -> a program file (.etch)
 *   open                    : etch_program_open(path, ...)      -> etch_program (immutable, shareable)
 *   session                 : etch_session_new(program, ...)    -> etch_session (KV cache, workspace, stats)
 *   run                     : etch_forward(...) or etch_generate(...)
 *
 * Conventions
 *   - Every function that can fail returns an etch_status. ETCH_OK is 0.
 *   - Functions without a handle (open, export, tokenize) write a message into an optional etch_error.
 *     Session functions keep their last message in the session (etch_session_error).
 *   - Nothing in the library prints, exits or aborts on bad input.
 *   - Freeing or closing NULL is a no-op.
 *   - An etch_program is immutable once opened: any number of sessions on any number of threads may
 *     share it. A session is used by one thread at a time.
 */
#ifndef ETCH_H
#define ETCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ETCH_VERSION_MAJOR 0
#define ETCH_VERSION_MINOR 1
#define ETCH_VERSION_PATCH 0
#define ETCH_VERSION_STRING "0.1.0"

/* The version of the library linked at run time, e.g. "0.1.0". */
const char *etch_version(void);

/* ---------------------------------------------------------------- status and errors */

typedef enum etch_status {
    ETCH_OK = 0,
    ETCH_ERR_ARG = 1,         /* a bad argument from the caller (NULL, out of range option) */
    ETCH_ERR_IO = 2,          /* a file could not be opened, read, mapped or written */
    ETCH_ERR_FORMAT = 3,      /* a file is malformed: truncated, bad checksum, sizes that disagree */
    ETCH_ERR_UNSUPPORTED = 4, /* a well-formed input etch does not support (newer version, architecture) */
    ETCH_ERR_NOMEM = 5,       /* an allocation failed */
    ETCH_ERR_INPUT = 6,       /* a forward call's inputs break the method's contract */
    ETCH_ERR_CONTEXT = 7,     /* the tokens do not fit the context */
    ETCH_ERR_TEXT = 8,        /* text is not valid UTF-8 */
    ETCH_ERR_CANCELLED = 9,   /* etch_session_cancel stopped the call; the session is usable again */
    ETCH_ERR_NUMERIC = 10,    /* the logits are not finite (NaN or infinity): a broken program or kernel */
    ETCH_ERR_LIMIT = 11       /* a configured limit (etch_session_set_limits, etch_set_memory_budget) */
} etch_status;

/* A short name for a status, e.g. "format error". Static storage. */
const char *etch_status_string(etch_status st);

/* Filled by functions that have no handle to keep a message in. */
typedef struct etch_error {
    etch_status status;
    char message[1024];
} etch_error;

/* ---------------------------------------------------------------- program */

typedef struct etch_program etch_program; /* an opened program file: immutable, shareable */
typedef struct etch_session etch_session; /* KV cache, workspace, stats: one per conversation */

/* The KV cache of a program that names none (etch_method_meta.kv_type). */
#define ETCH_DEFAULT_KV_TYPE "f16"

/* The method metadata of a program, with the names ExecuTorch's runner uses.
 * Every pointer is a view into the program and lives as long as it. */
typedef struct etch_method_meta {
    int32_t max_seq_len;          /* the most tokens one forward call accepts (1 = a static program) */
    int32_t max_context_len;      /* KV-cache length: positions 0 .. max_context_len-1 */
    int32_t use_kv_cache;         /* 1 */
    int32_t enable_dynamic_shape; /* 1 when max_seq_len > 1 */
    int32_t bos_id;               /* -1 when the model has none */
    int32_t n_eos;
    const int32_t *eos_ids;       /* [n_eos] */
    int32_t vocab_size;
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t dim;                  /* hidden size */
    int32_t hidden_dim;           /* feed-forward size */
    float norm_eps;
    float rope_base;
    int32_t tied_embeddings;      /* 1 when the classifier reuses the token embedding table */
    const char *arch;             /* "llama" */
    const char *dtype;            /* "f32" */
    const char *rope_style;       /* "adjacent" (pairs x[2i], x[2i+1]) or "half" (x[i], x[i+d/2]) */
    const char *tokenizer;        /* "sp-bpe" (score-ranked SentencePiece-style BPE) or "bpe" (merge-ranked) */
    const char *model_type;       /* what the source called the architecture: "llama", "qwen2", "qwen3", "gemma3" */
    const char *chat_template;    /* "" (none), "chatml", "qwen3", "llama3", "llama2" */
    int32_t sliding_window;       /* 0, or the window of the sliding-window layers (Gemma-3, Mistral) */
    int32_t n_window_layers;      /* how many layers attend through that window */
    const int32_t *layer_window;  /* [n_layers]: 0 for full attention, else the layer's window */
    int64_t kv_cache_bytes;       /* a session's K and V caches (windowed layers keep a ring) */
    int64_t kv_cache_full_bytes;  /* what they would take with a full cache in every layer */
    const char *kv_type;          /* a session's KV cache unless it asks for another: "f32", "f16" or "q8"
                                     (int8, one scale per row and KV head); kv_cache_bytes are for it */
} etch_method_meta;

/* Opens a program file: maps it, checks header, metadata and tensor directory (checksum, bounds,
 * alignment, shapes) before handing out anything. The weights are used in place from the mapping.
 * On success *out owns the mapping; release it with etch_program_close. On failure *out is NULL. */
etch_status etch_program_open(const char *path, etch_program **out, etch_error *err);

/* Closes a program. Every session made from it must be freed first. NULL is a no-op. */
void etch_program_close(etch_program *p);

/* The method metadata. Owned by the program. */
const etch_method_meta *etch_program_meta(const etch_program *p);

/* One entry of the tensor directory, for inspection. Views into the program. */
typedef struct etch_tensor_info {
    const char *name;
    const char *dtype; /* "f32" */
    int32_t ndim;
    int64_t dims[4];
    uint64_t offset;   /* from the start of the file, a multiple of 64 */
    uint64_t nbytes;
} etch_tensor_info;

/* File-level facts, for inspection. */
typedef struct etch_program_info {
    uint32_t format_version;
    uint64_t file_size;
    uint64_t checksum;   /* over header, metadata and directory: verified at open */
    uint64_t data_hash;  /* over the tensor data: verified by etch_program_verify_data */
    int32_t n_tensors;
    int32_t n_metadata;
    uint64_t n_parameters;
    double load_start_ms, load_end_ms; /* wall clock (ms since the epoch) around etch_program_open */
} etch_program_info;

void etch_program_info_get(const etch_program *p, etch_program_info *out);
etch_status etch_program_tensor(const etch_program *p, int32_t i, etch_tensor_info *out);

/* Hashes the tensor data and compares it with the hash stored at export. Reads every byte. */
etch_status etch_program_verify_data(const etch_program *p, etch_error *err);

/* Writes metadata entry i as "key: value" text (arrays abbreviated) into buf. Returns the length
 * it needed (as snprintf), or -1 when i is out of range. */
int etch_program_metadata_text(const etch_program *p, int32_t i, char *buf, size_t cap);

/* ---------------------------------------------------------------- export */

typedef struct etch_export_options {
    int32_t max_context_len; /* 0: the model's own context length; -N: the model's, at most N */
    int32_t max_seq_len;     /* 0: the default, 128; 1: a static program (one token per call).
                                Clamped to max_context_len. */
    const char *dtype;       /* "f32", "f16", "bf16", or NULL: the source's (f16 for quantized GGUF,
                                whose block-type matrices then stay as they are: see activations) */
    const char *chat_template; /* NULL: recognized from the source; "none", "chatml", "qwen3",
                                  "llama3", "llama2": that one */
    void (*progress)(void *user, const char *what, int64_t done, int64_t total); /* NULL, or tensors
                                  written so far (what: "exporting") */
    void *progress_user;
    const char *kv_type;     /* NULL: etch's default; "f32", "f16", "q8": the KV cache sessions keep
                                unless they ask for another (etch_method_meta.kv_type) */
    const char *activations; /* a GGUF's kept block types: NULL or "int8", in the integer-dot layout
                                with activations rounded to int8 per 32 values at run time, as
                                llama.cpp runs them (faster); "f32": weight-only with f32 activations,
                                the file's arithmetic exactly. Other sources and dtypes: no effect */
} etch_export_options;

/* Converts a llama2.c checkpoint (version 0 or legacy header) and its tokenizer.bin into a program
 * file at out_path. opt may be NULL for defaults. Nothing is written at out_path on failure. */
etch_status etch_export_llama2c(const char *model_path, const char *tokenizer_path,
                                const char *out_path, const etch_export_options *opt,
                                etch_error *err);

/* Converts a Hugging Face model folder (config.json, model.safetensors or its sharded index,
 * tokenizer.json, tokenizer_config.json, generation_config.json when present). Architectures:
 * LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM (text);
 * anything else is refused by name. Sliding windows are read from layer_types, Gemma-3's
 * sliding_window_pattern, Qwen's use_sliding_window / max_window_layers, or Mistral's sliding_window. */
etch_status etch_export_hf(const char *dir, const char *out_path, const etch_export_options *opt,
                           etch_error *err);

/* Converts a GGUF file (version 2 or 3; tensors F32, F16, BF16, Q8_0, Q4_0, Q5_0 and Q6_K as they are
 * (Q5_0 and Q6_K as etch's int8 q8 with their scales, exact), Q4_1, Q5_1, Q4_K and Q5_K dequantized to
 * f16; architectures llama, qwen2, qwen3, gemma3) with the tokenizer it carries. */
etch_status etch_export_gguf(const char *path, const char *out_path, const etch_export_options *opt,
                             etch_error *err);

/* A model run directly: the program to open for `source`. A program file is itself (out = source).
 * A GGUF file or a Hugging Face folder is exported on first use (with opt, NULL for the command
 * line's defaults: the model's context at most 4096; opt->progress reports the export) into
 * cache_dir (NULL: $ETCH_CACHE_DIR, else ~/.cache/etch) and reused while the source is unchanged:
 * the key covers its path, each file's size, modification time and first 64 KiB, and the options.
 * out[cap] receives the program's path; *exported (may be NULL) says whether this call wrote it. */
etch_status etch_cached_program(const char *source, const char *cache_dir, const etch_export_options *opt, char *out,
                                size_t cap, int *exported, etch_error *err);

/* ---------------------------------------------------------------- quantization */

/* What calibration saw (a8w8). */
typedef struct etch_calib_report {
    int32_t samples;         /* calibration samples run */
    int64_t tokens;          /* tokens the observers saw (prompt, answer and, in generate mode, generated) */
    int64_t generated;       /* of them, generated one at a time (generate mode) */
    double seconds;          /* wall time of the forward calls and observers */
    int32_t n_special;       /* the vocabulary's special and added tokens (control, user-defined) */
    int32_t n_special_seen;  /* of them, how many the calibration tokens contained */
    char missing[2048];      /* the others, space-separated ("..." when cut short) */
} etch_calib_report;

typedef struct etch_quantize_options {
    const char *scheme;     /* weight-only (activations stay f32): "8w" int8 weights, one scale per
                               output channel; "4w" int4 weights, one scale per group_size inputs.
                               int8 activations, integer dot products: "8da8w", "8da4w" (activations
                               quantized per token at run time); "a8w8" (static per-tensor scale and
                               zero point from calibration, with per-channel int8 weights) */
    int32_t group_size;     /* 0: the scheme's (one per row for 8w, 8da8w, a8w8; 32 for 4w, 8da4w) */
    int32_t act_group;      /* 8da8w, 8da4w: 0 for one activation scale per token; G (even, a multiple
                               of every integer-dot matrix's group) for one per G values of a token,
                               as llama.cpp quantizes the activations of Q4_0 and Q8_0 (G = 32) */
    const char *qembedding; /* NULL: the embedding table stays as it is; "8w" or "4w": quantized too
                               (tied embeddings then stay tied; without it a tied table gives the
                               output layer its own quantized copy) */
    /* Calibration (a8w8; refused for the other schemes, which have no static ranges). Samples:
     * plain text files (.txt: chunked to the context), JSON or JSON Lines (.json, .jsonl): strings,
     * or {"text": ...}, or chat samples {"messages": [{"role", "content", "reasoning_content"?}]}
     * rendered with the program's chat template, answers and special tokens included. */
    const char *const *calib_files;
    int32_t n_calib_files;
    const char *calib_mode; /* NULL or "prefill": each sample in one batched prefill; "generate":
                               then gen_tokens greedy tokens one at a time, observed too */
    const char *observer;   /* NULL or "minmax"; "moving-average" (of each forward call's min and
                               max, constant 0.01); "percentile" (0.01% and 99.99%); "mse" (the
                               clipping range with the least squared rounding and clipping error) */
    int32_t calib_limit;    /* 0: every sample; N: the first N */
    int32_t gen_tokens;     /* generate mode: tokens per sample (0: 128) */
    int32_t threads;        /* threads for quantizing and calibrating (0: the physical cores) */
    etch_calib_report *report;                       /* NULL, or filled after calibration */
    void (*report_line)(void *user, const char *line); /* NULL, or each observed site's range, a line each */
    void (*progress)(void *user, const char *what, int64_t done, int64_t total); /* NULL, or how far:
                               what is "calibrating" (tokens) or "quantizing" (tensors) */
    void *user;
} etch_quantize_options;

/* Writes a copy of the program at in_path whose linear layers are quantized. The input must have
 * float weights. Nothing is written on failure. */
etch_status etch_quantize(const char *in_path, const char *out_path, const etch_quantize_options *opt,
                          etch_error *err);

/* ---------------------------------------------------------------- synthetic models */

/* A model with seeded random weights (matrices N(0, std), norms 1 + N(0, std), biases N(0, std)) in
 * a real model's shapes or any other, with a real tokenizer, written as a Hugging Face folder or a
 * GGUF file that llama.cpp loads. The same options give the same bytes. */
typedef struct etch_synth_options {
    const char *arch;       /* "llama", "qwen2", "qwen3", "gemma3" */
    const char *preset;     /* NULL, "qwen3-0.6b", "llama-3.2-1b", "gemma3-1b", "tiny" */
    int32_t layers, dim, hidden_dim, heads, kv_heads, head_dim, context_len; /* 0: the preset's */
    uint64_t seed;
    float std;              /* 0: 0.02 */
    const char *tokenizer;  /* a tokenizer.json (tokenizer_config.json beside it is copied too) */
    const char *format;     /* "hf" or "gguf" */
    const char *dtype;      /* "f32", "f16", "bf16"; GGUF also "q8_0", "q4_0" */
    int32_t sliding_window; /* gemma3: the local layers' window (0: 512); every sixth layer is global */
} etch_synth_options;

/* Writes the model at out_path (a folder for "hf", a file for "gguf"). */
etch_status etch_synth(const etch_synth_options *opt, const char *out_path, etch_error *err);

/* ---------------------------------------------------------------- tokenizer sources */

/* A tokenizer on its own, from a program file, a Hugging Face tokenizer.json (or the folder that
 * holds it), or a GGUF file: for tokenizing without a model. */
typedef struct etch_tokenizer etch_tokenizer;
etch_status etch_tokenizer_open(const char *path, etch_tokenizer **out, etch_error *err);
void etch_tokenizer_close(etch_tokenizer *t);
/* As etch_tokenize; add_bos prepends the BOS id when the tokenizer has one. */
etch_status etch_tokenizer_encode(const etch_tokenizer *t, const char *text, size_t len, int add_bos,
                                  int32_t **ids_out, int32_t *n_out, etch_error *err);
/* As etch_detokenize. */
etch_status etch_tokenizer_decode(const etch_tokenizer *t, const int32_t *ids, int32_t n, char **text_out,
                                  size_t *len_out, etch_error *err);
int32_t etch_tokenizer_vocab_size(const etch_tokenizer *t);

/* ---------------------------------------------------------------- tokenizer */

/* Encodes UTF-8 text with the program's tokenizer. With add_bos, the BOS id comes first.
 * On success *ids_out is a malloc'ed array of *n_out ids that the caller frees with etch_free.
 * Invalid UTF-8 is refused with ETCH_ERR_TEXT and the byte offset in the message. */
etch_status etch_tokenize(const etch_program *p, const char *text, size_t len, int add_bos,
                          int32_t **ids_out, int32_t *n_out, etch_error *err);

/* Decodes ids into text: control tokens as their text (as Hugging Face's decode without
 * skip_special_tokens), no leading space from a SentencePiece dummy prefix.
 * *text_out is malloc'ed, NUL-terminated, to be freed with etch_free. */
etch_status etch_detokenize(const etch_program *p, const int32_t *ids, int32_t n, char **text_out,
                            size_t *len_out, etch_error *err);

/* Streaming detokenization, as generation prints: push ids one at a time, get back only complete
 * UTF-8 characters. Bytes of a character split across tokens are held until it is complete; an
 * invalid sequence becomes U+FFFD; control tokens (BOS, EOS, <|im_end|> ...) give no text (unlike
 * etch_detokenize, which writes them). The decoder borrows the program, which must outlive it. */
typedef struct etch_decoder etch_decoder;
etch_status etch_decoder_new(const etch_program *p, etch_decoder **out);
/* Appends the text of `id` (prev_id: the id before it, or -1) and returns a view of the bytes that
 * are now complete; the view is valid until the next call. */
const char *etch_decoder_push(etch_decoder *d, int32_t prev_id, int32_t id, size_t *len);
/* Returns what is still held (as U+FFFD for an incomplete character) and resets. */
const char *etch_decoder_flush(etch_decoder *d, size_t *len);
void etch_decoder_free(etch_decoder *d);

/* Frees what etch handed out (ids, text): with the allocator etch_set_allocator installed. */
void etch_free(void *ptr);

/* ---------------------------------------------------------------- allocation */

/* Every allocation etch makes goes through one function, in the shape of Lua's lua_Alloc (without the
 * old size): fn(ud, NULL, n) allocates n > 0 bytes, fn(ud, p, n) resizes p to n > 0 bytes (p is kept on
 * failure), fn(ud, p, 0) frees p. NULL means failure: the call that needed the memory returns
 * ETCH_ERR_NOMEM (or NULL where it returns a pointer) and leaks nothing. Memory must be aligned as
 * malloc's is. Covers etch's own allocations and those of the libraries it calls (cJSON, PCRE2; NFC
 * runs in etch's buffers); not stdio's buffers, thread stacks, file mappings, or the kernels' block of
 * scratch per thread (128 KiB from the C library for each thread that runs a forward call, in place
 * of stack, freed when the thread exits).
 * fn is called from every thread that uses etch (and from sessions' worker threads): it must be
 * thread-safe. Install it before any other call, never while a program, session, tokenizer or decoder
 * exists; a NULL fn restores the C library's malloc, realloc and free. */
typedef void *(*etch_alloc_fn)(void *ud, void *ptr, size_t size);
void etch_set_allocator(etch_alloc_fn fn, void *ud);

/* ---------------------------------------------------------------- chat */

typedef struct etch_chat_options {
    const char *system;   /* a system message, or NULL */
    int think;            /* Qwen3's enable_thinking: -1 the template's default (on), 0 off, 1 on */
    const char *template_name; /* NULL: the program's; else "chatml", "qwen3", "llama3", "llama2" */
} etch_chat_options;

/* Renders one user turn (and an optional system message) in the chat template, ready for
 * generation: the assistant's turn is opened. BOS is not written (generation adds it when the
 * program has one). *out is malloc'ed; free with etch_free. ETCH_ERR_UNSUPPORTED when the program
 * has no template and none is named. */
etch_status etch_chat_render(const etch_program *p, const char *user, const etch_chat_options *opt, char **out,
                             etch_error *err);

/* One message of a conversation: role "system", "user" or "assistant"; reasoning (Qwen3's think
 * block of an assistant message) may be NULL. */
typedef struct etch_chat_message {
    const char *role;
    const char *content;
    const char *reasoning;
} etch_chat_message;

/* Renders messages[0..n) in the chat template; with add_generation_prompt, the assistant's turn is
 * then opened. BOS is not written. *out as etch_chat_render's. */
etch_status etch_chat_render_messages(const etch_program *p, const etch_chat_message *messages, int32_t n,
                                      int add_generation_prompt, const etch_chat_options *opt, char **out,
                                      etch_error *err);

/* ---------------------------------------------------------------- sessions and forward */

/* Creates a session: a KV cache for K and V per layer, [kv rows, n_kv_heads * head_dim] where a
 * full-attention layer keeps max_context_len rows and a sliding-window layer a ring of window +
 * max_seq_len - 1 (etch_method_meta.kv_cache_bytes in all), a workspace for max_seq_len rows and a
 * thread pool (one worker per physical core), all made here,
 * none in the token loop. Borrows the program. */
etch_status etch_session_new(etch_program *p, etch_session **out, etch_error *err);
/* As etch_session_new, with n_threads workers for its forward calls (0: the machine's physical
 * cores; more than the processors online is capped to them, as extra threads only wait on each
 * other: etch_session_threads says how many run). The threads are created here, once, and live as
 * long as the session. */
etch_status etch_session_new_threads(etch_program *p, int n_threads, etch_session **out, etch_error *err);
/* A session's choices; zero-initialized means every default. */
typedef struct etch_session_options {
    int32_t n_threads;   /* as etch_session_new_threads */
    const char *kv_type; /* NULL: the program's (etch_method_meta.kv_type); else "f32", "f16" or "q8" */
} etch_session_options;
/* As etch_session_new_threads, with the options (NULL: every default). An unknown kv_type is
 * ETCH_ERR_ARG. */
etch_status etch_session_new_opts(etch_program *p, const etch_session_options *opt, etch_session **out,
                                  etch_error *err);
int etch_session_threads(const etch_session *s);
/* The session's KV cache type: "f32", "f16" or "q8". */
const char *etch_session_kv_type(const etch_session *s);
void etch_session_free(etch_session *s);

/* The last error message of this session ("" when none). Valid until the next call on it. */
const char *etch_session_error(const etch_session *s);

/* Memory. A session reserves, when it is made, its KV cache (etch_method_meta.kv_cache_bytes), a
 * workspace for max_seq_len rows, the logits and per-position buffers: etch_session_memory_bytes.
 * They are reserved as virtual memory (zero pages the kernel supplies on first touch), so a new
 * session costs little resident memory until its positions are written; a full context touches all
 * of it. A process-wide budget, when set, counts the reserved bytes of every live session and
 * refuses a new session that would pass it (ETCH_ERR_LIMIT, with the figures), instead of letting a
 * later write end in the kernel's out-of-memory killer. 0 (the default) sets no budget. Returns
 * ETCH_ERR_ARG for a negative budget. A budget below what live sessions hold refuses new ones only. */
etch_status etch_set_memory_budget(int64_t bytes);
/* The bytes the live sessions of this process have reserved, and the budget (0: none). */
int64_t etch_memory_in_use(void);
int64_t etch_memory_budget(void);
/* The bytes this session reserved (counted against the budget). */
int64_t etch_session_memory_bytes(const etch_session *s);

/* Asks the session's current call to stop: tokenizing a prompt (checked every few thousand
 * pre-tokens), prefill (between forward calls) and decoding (before each token). A generation
 * stopped while decoding ends normally with stop_reason 4 (cancelled); one stopped before its first
 * token returns ETCH_ERR_CANCELLED. The session stays usable. Safe from another thread and from a
 * signal handler (one atomic store). Each call that starts work (etch_generate_start, etch_prefill)
 * clears the request first, so a request made while no call runs is dropped. */
void etch_session_cancel(etch_session *s);

/* Limits applied before any work, for callers that take prompts from strangers: a prompt longer
 * than max_prompt_bytes is refused before it is tokenized, one of more than max_prompt_tokens
 * before prefill, and a request for more than max_new_tokens before either (ETCH_ERR_LIMIT). 0 sets
 * no limit (the context still bounds the tokens). */
typedef struct etch_limits {
    int64_t max_prompt_bytes;
    int32_t max_prompt_tokens;
    int32_t max_new_tokens;
} etch_limits;
etch_status etch_session_set_limits(etch_session *s, const etch_limits *limits);

/* ---------------------------------------------------------------- a session's state */

/* The positions the KV cache holds (0 after etch_session_new or a reset), and their ids: a view
 * valid until the next call on the session. A generation leaves its last sampled token unfed: it
 * is not among these ids, and the next CONTINUE or REUSE generation feeds it first. */
int32_t etch_session_position(const etch_session *s);
const int32_t *etch_session_cache_ids(const etch_session *s, int32_t *n);
/* Truncates the cache to its first pos positions (0 <= pos <= position): later calls overwrite the
 * rest. A layer with a sliding-window ring refuses (ETCH_ERR_INPUT, with a message) when the keys the
 * next position needs were overwritten; reset and prefill again then. */
etch_status etch_session_rewind(etch_session *s, int32_t pos);
/* Empties the session: position 0, no conversation. */
void etch_session_reset(etch_session *s);

/* Saves the cache (its ids and every layer's keys and values) to a file, whole or not at all, and
 * loads it into a session of the same program: llama.cpp's --prompt-cache, so a long system prompt
 * is prefilled once. The file carries the program's checksum and shapes; a file from another program
 * is refused by name. Loading replaces the session's state. */
etch_status etch_session_save(etch_session *s, const char *path);
etch_status etch_session_load(etch_session *s, const char *path);

/* One forward call: tokens[n] at positions start_pos .. start_pos+n-1, over the KV cache, which it
 * extends. Requires 1 <= n <= max_seq_len, 0 <= start_pos, start_pos + n <= max_context_len and every
 * id in [0, vocab_size); otherwise ETCH_ERR_INPUT with a message showing the method metadata and the
 * inputs. The cache must hold positions 0 .. start_pos-1 from earlier calls (positions past
 * start_pos are overwritten).
 * logits: [vocab_size] for the last position, or [n, vocab_size] (row i = position start_pos+i)
 * when all_logits is non-zero. May be NULL to only fill the cache. */
etch_status etch_forward(etch_session *s, const int32_t *tokens, int32_t n, int32_t start_pos,
                         float *logits, int all_logits);

/* The greedy token of logits[n]: the index of the largest value, the first one on ties (a NaN is
 * skipped unless it comes first), as generation's temperature 0 picks it; 0 when n < 1. */
int32_t etch_argmax(const float *logits, int32_t n);

/* Prefills tokens[n] at positions start_pos .. start_pos+n-1 under the runtime's policy: forward
 * calls of min(bound, tokens left) tokens, bound 0 meaning the program's max_seq_len and 1 one token
 * per call (any program). logits: [vocab_size] for the last position, or [n, vocab_size] when
 * all_logits, or NULL. The same checks and errors as etch_forward, for the whole span before any
 * work. Generation, calibration, `etch eval` and `etch bench` all prefill through it. */
etch_status etch_prefill(etch_session *s, const int32_t *tokens, int32_t n, int32_t start_pos, int32_t bound,
                         float *logits, int all_logits);

/* ---------------------------------------------------------------- generation */

typedef enum etch_prefill_mode {
    ETCH_PREFILL_AUTO = 0,      /* batched when max_seq_len > 1, else one token per call */
    ETCH_PREFILL_BATCHED = 1,   /* chunks of min(max_seq_len, tokens left) */
    ETCH_PREFILL_SEQUENTIAL = 2 /* one token per call on any program */
} etch_prefill_mode;

/* What a generation does with the session's cache before its prompt.
 *   RESET: start again at position 0 (one-shot prompts).
 *   CONTINUE: append the prompt after what the cache holds (and the last token sampled, which a
 *     generation leaves unfed): a conversation that sends only its new part.
 *   REUSE: the prompt is the whole text; the longest common prefix of its ids and the cache's is
 *     kept and only the rest prefilled (an app that re-sends its history pays for the new tokens;
 *     stats.reused_tokens counts what was kept). */
typedef enum etch_cache_mode { ETCH_CACHE_RESET = 0, ETCH_CACHE_CONTINUE = 1, ETCH_CACHE_REUSE = 2 } etch_cache_mode;

/* When the context fills during generation. STOP ends with stop_reason 2. SHIFT keeps the first
 * n_keep positions, drops the oldest half of the rest, prefills what is kept again at its new
 * positions (batched; exact, as RoPE positions change) and goes on; stats.context_shifts counts it. */
typedef enum etch_context_policy { ETCH_CONTEXT_STOP = 0, ETCH_CONTEXT_SHIFT = 1 } etch_context_policy;

typedef struct etch_generate_config {
    int32_t max_new_tokens; /* generated tokens, not counting the prompt; stops earlier at EOS or a full context */
    float temperature;      /* 0: greedy */
    int32_t top_k;          /* 0: off */
    float top_p;            /* 1: off */
    uint64_t seed;
    etch_prefill_mode prefill;
    int add_bos;            /* prepend the program's BOS id (when it has one) to a prompt at position 0 */
    etch_cache_mode cache;  /* what happens to the session's cache first: RESET (the default), CONTINUE, REUSE */
    const char *const *stop; /* [n_stop] stop strings, or NULL: generation ends before the first one appears,
                              * and no text of it (or after it) is ever emitted; borrowed for the generation */
    int32_t n_stop;
    etch_context_policy context; /* when the context fills while generating: STOP (default) or SHIFT */
    int32_t n_keep;         /* SHIFT: the first n_keep positions (a system prompt) are never dropped */
} etch_generate_config;

/* Fills the defaults: 128 tokens, greedy, top_k 0, top_p 1, seed 42, auto prefill, add_bos 1, cache
 * RESET, no stop strings, context STOP, n_keep 0. */
void etch_generate_config_default(etch_generate_config *cfg);

/* Called once per generated token with the text that became complete (maybe empty, never a broken
 * UTF-8 character; a view valid during the call). Return non-zero to stop generation. When
 * generation ends holding the bytes of an unfinished character, one last call has token -1 and
 * that text (as U+FFFD). */
typedef int (*etch_token_callback)(void *user, int32_t token, const char *text, size_t len);

/* Tokenizes prompt, prefills it (policy from cfg->prefill), then samples and decodes up to
 * cfg->max_new_tokens tokens. Resets the session's KV cache first. A prompt that cannot fit the
 * context is refused before any forward call (ETCH_ERR_CONTEXT). on_token may be NULL. */
etch_status etch_generate(etch_session *s, const char *prompt, const etch_generate_config *cfg,
                          etch_token_callback on_token, void *user);

/* Generation as a pull loop, for callers that want tokens as values (bindings, event loops):
 * etch_generate_start tokenizes and prefills (resetting the session), then each
 * etch_generate_next samples one token and returns it with the text that became complete (a view
 * valid until the next call). At the end *token is -1 and *text holds what was still held back (an
 * unfinished character as U+FFFD); later calls keep returning -1. The stats are final then.
 * etch_generate_stop ends a generation early (stop_reason 3). Same thread rules as the session. */
etch_status etch_generate_start(etch_session *s, const char *prompt, const etch_generate_config *cfg);
etch_status etch_generate_next(etch_session *s, int32_t *token, const char **text, size_t *len);
void etch_generate_stop(etch_session *s);

/* A conversation turn: starts a generation (then etch_generate_next as above) answering
 * messages[0..n), whose last is a user message. When the session holds this conversation's earlier
 * turns (messages[0..k) as rendered and answered here, the answers exactly as generated), only the
 * new messages are rendered and prefilled after them: the cache keeps the generated ids, nothing is
 * tokenized again. Otherwise the whole conversation is rendered and prefilled with REUSE. cfg->cache
 * is ignored. The answer's text becomes the conversation's next assistant message when it ends. */
etch_status etch_chat_start(etch_session *s, const etch_chat_message *messages, int32_t n,
                            const etch_chat_options *opt, const etch_generate_config *cfg);

/* The ids of the last etch_generate's prompt (BOS included). View valid until the next generate. */
const int32_t *etch_session_prompt_ids(const etch_session *s, int32_t *n);
/* The ids generated by the last etch_generate. View valid until the next generate. */
const int32_t *etch_session_generated_ids(const etch_session *s, int32_t *n);

/* ---------------------------------------------------------------- machine limits */

/* Measures, with n_threads threads (0: the physical cores), the machine's fp32 fused multiply-add
 * peak (GFLOP/s, a multiply-add counting 2) and its memory read bandwidth (GB/s, summing a buffer
 * of 256 MiB split between the threads, on 2 MiB pages where the system gives them, as a program's
 * weights are mapped). Takes about half a second. For benchmarks that report achieved
 * figures as fractions of the machine's. */
etch_status etch_roofline(int n_threads, double *gflops, double *read_gbps, etch_error *err);

/* ---------------------------------------------------------------- stats */

/* What the last etch_generate measured. Timestamps are wall-clock milliseconds since the epoch,
 * taken from one monotonic clock (so they are ordered), as ExecuTorch's runner reports them.
 * docs/STATS.md says what each one marks. */
typedef struct etch_stats {
    int64_t prompt_tokens;
    int64_t generated_tokens;
    double model_load_start_ms;
    double model_load_end_ms;
    double inference_start_ms;
    double token_encode_end_ms;
    double model_execution_start_ms;
    double model_execution_end_ms;
    double inference_end_ms;
    double prompt_eval_end_ms;
    double first_token_ms;
    double aggregate_sampling_time_ms;
    etch_prefill_mode prefill_used; /* BATCHED or SEQUENTIAL: what ran */
    int32_t n_chunks;
    const int32_t *chunks;          /* [n_chunks] tokens per prefill forward call */
    int32_t stop_reason;            /* 0: max_new_tokens, 1: EOS, 2: context full, 3: callback or
                                     * etch_generate_stop, 4: etch_session_cancel, 5: a stop string */
    int64_t reused_tokens;          /* prompt positions kept from the cache (CONTINUE, REUSE, chat); not
                                     * in prompt_tokens, which counts the tokens prefilled */
    int32_t context_shifts;         /* times the SHIFT policy made room */
} etch_stats;

const etch_stats *etch_session_stats(const etch_session *s);

/* Writes `PyTorchObserver {...}` (one line, no newline) into buf. Returns the length it needed. */
int etch_stats_observer_line(const etch_stats *st, char *buf, size_t cap);
/* Writes ExecuTorch's human report (several lines, each ending in a newline). Returns the length
 * it needed. */
int etch_stats_report(const etch_stats *st, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* ETCH_H */
