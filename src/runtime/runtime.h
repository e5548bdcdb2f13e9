/* runtime: program and session lifecycle, the prefill policy, the decode loop, sampling, stats.
 * Internal structures shared by the runtime's files; the public view is include/etch.h. */
#ifndef ETCH_RUNTIME_H
#define ETCH_RUNTIME_H

#include "../base/base.h"
#include "../format/format.h"
#include "../model/model.h"
#include "../tokenizer/tokenizer.h"

struct etch_program {
    fmt_file file;          /* the mapping; everything below points into it */
    etch_method_meta meta;
    model_config cfg;
    model_weights w;        /* w.layers owned */
    float *inv_freq;        /* [head_dim / 2] RoPE frequencies, owned */
    float *inv_freq_local;  /* [head_dim / 2] those of windowed layers when they have their own base, owned */
    int32_t *window;        /* [n_layers] each layer's window (0: full), owned */
    int32_t *kv_rows;       /* [n_layers] each layer's cache rows, owned */
    tok_tokenizer tok;
    uint64_t n_params;
    double load_start_ms, load_end_ms;
};

/* Token/probability pair for top-k / top-p sampling. */
typedef struct rt_cand {
    float p;
    int32_t id;
} rt_cand;

struct etch_session {
    etch_program *prog;     /* borrowed */
    base_pool *pool;        /* owned: created once with the session */
    model_state st;
    float *logits;          /* [vocab] */
    rt_cand *cand;          /* [vocab] sampling scratch */
    char *text;             /* [text_cap] decoded text handed to the callback */
    size_t text_cap;
    tok_utf8_stream utf8;   /* holds an unfinished character between callbacks */
    int32_t *prompt;        /* [n_prompt] ids of the last prompt (malloc'ed per generate call) */
    int32_t n_prompt;
    int32_t *generated;     /* [generated_cap], max_context_len at first */
    int32_t generated_cap;
    int32_t n_generated;
    int32_t *chunks;        /* [max_context_len] prefill chunk sizes */
    int32_t kv_end;         /* positions 0 .. kv_end-1 have been written by forward calls (rings: the newest) */
    int32_t *ctx_ids;       /* [max_context_len] the id at each cached position */
    int32_t n_ctx;          /* positions the cache holds for the conversation (ctx_ids valid) */
    int32_t pending;        /* the last sampled token, not fed yet, or -1 */
    char *hold;             /* [hold_cap] generated text held back while it could begin a stop string */
    size_t n_hold, hold_cap;
    char *emit;             /* [emit_cap] the text handed out by the last etch_generate_next */
    size_t emit_cap;
    char *answer;           /* [answer_cap] the text of the answer being generated (for the conversation) */
    size_t answer_len, answer_cap;
    struct {                /* the conversation the cache holds (etch_chat_start), each string owned */
        char **role, **content;
        int32_t n, cap;
        int open;           /* its last user turn is being answered */
    } chat;
    int cancel;             /* set by etch_session_cancel (any thread, a signal handler), read atomically */
    etch_limits limits;     /* etch_session_set_limits; zeros: none */
    int64_t reserved;       /* bytes counted against the memory budget */
    etch_stats stats;
    uint64_t rng;
    /* Generation in progress (etch_generate_start .. etch_generate_next). */
    struct {
        int active, done, stopped; /* stopped: the text reached a stop string; the next call ends */
        etch_generate_config cfg;
        int32_t pos, prev;
        double sampling_us;
    } gen;
    char error[4096];
};

/* One turn of a conversation: the public etch_chat_message (role "system", "user" or "assistant";
 * reasoning, Qwen3's think block of an assistant turn, may be NULL). */
typedef etch_chat_message rt_chat_turn;

/* The chat templates etch renders natively: their names as "chatml, qwen3, ..." for messages, and
 * whether a name is one of them. The exporter and calibration check names through these. */
extern const char rt_chat_template_list[];
int rt_chat_template_known(const char *name);

/* Writes turns[0..n) in chat template `name` (rt_chat_template_list), then, when gen, the
 * assistant's header that asks for the next answer (qwen3 with think == 0: and an empty think block).
 * A qwen3 assistant turn with reasoning carries it in a think block. llama2 and gemma take an optional
 * system turn (folded into the first user turn), then user and assistant turns in turn. *out is
 * base_malloc'ed. etch_chat_render, conversations and calibration's chat samples all render here. */
etch_status rt_chat_render_turns(const char *name, const rt_chat_turn *turns, int n, int gen, int think, char **out,
                                 etch_error *err);
/* The same turns as they follow an assistant answer already in the cache: the answer's end marker
 * first (e.g. "<|im_end|>\n"), then the turns; *marker_len says how long the marker is. */
etch_status rt_chat_render_after_answer(const char *name, const rt_chat_turn *turns, int n, int think, char **out,
                                        size_t *marker_len, etch_error *err);
/* The text of the token that ends a turn in template `name` ("<|im_end|>"; NULL when the template
 * ends turns with EOS itself): the exporter adds its id to the EOS ids. */
const char *rt_chat_end_token(const char *name);

/* The prefill policy, the one loop every caller runs (prefill.c): tokens[n] at positions
 * start_pos .. start_pos+n-1 in forward calls of min(bound, tokens left) rows (bound 1: one token per
 * call). logits as etch_forward's for the whole span: [vocab] of the last position, or [n, vocab]
 * when all_logits, or NULL. chunks, when not NULL, receives each call's size from chunks[*n_chunks]
 * on (*n_chunks grows). */
etch_status rt_prefill(etch_session *s, const int32_t *tokens, int32_t n, int32_t start_pos, int32_t bound,
                       float *logits, int all_logits, int32_t *chunks, int32_t *n_chunks);

/* Generation (generate.c). rt_generate_ids prefills ids[n] after the first `keep` cached positions
 * (the unfed last token first when feed_pending) and opens the decode loop; rt_generate_loop runs it
 * with a callback, as etch_generate does. */
etch_status rt_generate_begin(etch_session *s, const etch_generate_config *cfg); /* checks, stats, cancel */
etch_status rt_generate_ids(etch_session *s, const int32_t *ids, int32_t n, int32_t keep, int feed_pending,
                            const etch_generate_config *cfg);
etch_status rt_generate_loop(etch_session *s, etch_token_callback on_token, void *user);
int rt_is_eos(const etch_method_meta *m, int32_t id);

/* The cache's positions (conversation.c): reset to empty; whether a rewind to pos keeps every key the
 * next position needs (a window's ring may have overwritten them); the rewind itself. */
void rt_reset(etch_session *s);
etch_status rt_rewind_possible(etch_session *s, int32_t pos);
etch_status rt_rewind(etch_session *s, int32_t pos);
/* The conversation the session holds: forgotten (its cache no longer matches a rendering), the
 * answer's text as it is generated, and the answer recorded as an assistant message at the end. */
void rt_chat_forget(etch_session *s);
void rt_answer_add(etch_session *s, const char *text, size_t n);
void rt_chat_answered(etch_session *s);

/* The next token from logits[vocab] under cfg (greedy at temperature 0); logits are overwritten. */
int32_t rt_sample(etch_session *s, const etch_generate_config *cfg, float *logits);

/* Calls fn at every observed site of every forward call of the session (NULL: none); calibration's hook. */
void rt_set_observer(etch_session *s, model_observer fn, void *user);

/* Appends the method metadata and the inputs of a forward call to buf (cap bytes in all): what
 * ExecuTorch's runner prints when a call fails. */
void rt_describe_call(const etch_program *p, const int32_t *tokens, int32_t n, int32_t start_pos, char *buf, size_t cap);

/* The memory budget (limits.c): admits `bytes` more of reservations or refuses with the figures;
 * release gives them back. */
etch_status rt_memory_admit(int64_t bytes, etch_error *err);
void rt_memory_release(int64_t bytes);
/* The session's cancel request: read, and cleared when a call starts work. */
int rt_cancelled(const etch_session *s);
void rt_cancel_clear(etch_session *s);

/* The exporter's and quantizer's check of a program they wrote, before it replaces the destination
 * (a fmt_check_fn): it opens tmp_path with every check a runtime makes. user is the destination path
 * as the caller gave it; a message names that, not the temporary. */
etch_status rt_check_written(const char *tmp_path, void *user, etch_error *err);
/* The exporter's and quantizer's way to add a quantized matrix's scales and mins (NULL: none) under the
 * names the loader reads: '<name>.scale' and '<name>.min' [sdims] of scale_type (KERN_F32, KERN_F16, or
 * KERN_SCALE_S8 as int8, dtype q8, with their f16 factors '<name>.scale_d' and '<name>.min_d'
 * [sdims[0], sdims[1] / sub_groups] d_at bytes into each buffer). The writer keeps the pointers. */
void rt_add_scales(fmt_writer *w, const char *name, int scale_type, int sub_groups, const uint64_t sdims[2],
                   const void *scales, const void *mins, size_t d_at);

/* Records a message in the session and returns st. */
etch_status rt_fail(etch_session *s, etch_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
