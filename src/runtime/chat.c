/* runtime: chat templates, rendered natively. The exporter recognizes a model's Jinja template
 * by its markers and records its name; each name here writes the same text the Jinja template
 * writes for a list of turns (an optional system message and one user turn with the generation
 * prompt for etch_chat_render; whole conversations with answers for calibration samples). */
#include "runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing text: s[len] with room for cap bytes. */
typedef struct text_buf {
    char *s;
    size_t len, cap;
} text_buf;

/* Appends printf output to b, growing it; 0 when memory ran out. */
static int append(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int append(text_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) return 0;
    if ((size_t)n >= b->cap - b->len) {
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *ns = base_realloc(b->s, cap);
        if (!ns) return 0;
        b->s = ns, b->cap = cap;
        va_start(ap, fmt);
        vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
    return 1;
}

/* The one list of template names: the array and the text of messages come from it. */
#define RT_TEMPLATES(X, SEP) X("chatml") SEP X("qwen3") SEP X("llama3") SEP X("llama2") SEP X("gemma")
#define RT_NAME(s) s
#define RT_COMMA ,
#define RT_JOIN ", "
static const char *const template_names[] = {RT_TEMPLATES(RT_NAME, RT_COMMA)};
const char rt_chat_template_list[] = RT_TEMPLATES(RT_NAME, RT_JOIN);

int rt_chat_template_known(const char *name) {
    for (size_t i = 0; name && i < sizeof template_names / sizeof *template_names; i++)
        if (!strcmp(name, template_names[i])) return 1;
    return 0;
}

/* Renders turns[0..n); gen opens the assistant's turn; after_answer: the turns follow an assistant
 * answer already in the cache, whose end marker comes first (its length in *marker_len). */
static etch_status render(const char *name, const rt_chat_turn *turns, int n, int gen, int think, int after_answer,
                          char **out, size_t *marker_len, etch_error *err) {
    *out = NULL;
    if (!rt_chat_template_known(name))
        return base_fail(err, ETCH_ERR_ARG, "chat template '%s' is not one of %s", name, rt_chat_template_list);
    int qwen3 = !strcmp(name, "qwen3"), chatml = qwen3 || !strcmp(name, "chatml"), llama3 = !strcmp(name, "llama3");
    int llama2 = !strcmp(name, "llama2"), gemma = !strcmp(name, "gemma");
    if (think >= 0 && !qwen3)
        return base_fail(err, ETCH_ERR_ARG, "--think/--no-think need the qwen3 template (this one is %s)", name);
    /* Llama 2 and Gemma alternate user and assistant after one optional system turn (folded into the
     * first user turn); after an answer, a user turn comes first. */
    int sys = !after_answer && n && !strcmp(turns[0].role, "system");
    for (int i = 0; (llama2 || gemma) && i < n; i++)
        if (!strcmp(turns[i].role, "system") ? i != 0 || after_answer
                                              : strcmp(turns[i].role, (i - sys) % 2 == 0 ? "user" : "assistant"))
            return base_fail(err, ETCH_ERR_UNSUPPORTED,
                             "the %s template takes an optional system turn first, then user and assistant turns in "
                             "turn (turn %d is %s)", name, i, turns[i].role);
    text_buf b = {base_malloc(256), 0, 256};
    if (!b.s) return base_fail(err, ETCH_ERR_NOMEM, "out of memory rendering the chat");
    b.s[0] = '\0';
    int ok = 1;
    if (after_answer)
        ok = append(&b, "%s", chatml ? "<|im_end|>\n" : llama3 ? "<|eot_id|>" : llama2 ? " </s>" : "<end_of_turn>\n");
    if (marker_len) *marker_len = b.len;
    for (int i = sys; (llama2 || gemma) && i < n && ok; i++) {
        const rt_chat_turn *t = &turns[i];
        int first = i == sys && sys;
        int user = !strcmp(t->role, "user");
        if (llama2 && !user) /* [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] user [/INST]...:
                              * the first BOS is generation's, the later ones are text (special tokens) */
            ok = append(&b, " %s </s>", t->content);
        else if (llama2)
            ok = append(&b, "%s[INST] %s%s%s%s [/INST]", i > sys || after_answer ? "<s>" : "", first ? "<<SYS>>\n" : "",
                        first ? turns[0].content : "", first ? "\n<</SYS>>\n\n" : "", t->content);
        else /* Gemma: <start_of_turn>user\n[system\n\n]content<end_of_turn>\n, the assistant as "model" */
            ok = append(&b, "<start_of_turn>%s\n%s%s%s<end_of_turn>\n", user ? "user" : "model",
                        first ? turns[0].content : "", first ? "\n\n" : "", t->content);
    }
    for (int i = 0; i < n && ok && (chatml || llama3); i++) {
        const rt_chat_turn *t = &turns[i];
        int thinks = qwen3 && t->reasoning && !strcmp(t->role, "assistant");
        if (chatml)
            ok = append(&b, "<|im_start|>%s\n%s%s%s%s<|im_end|>\n", t->role, thinks ? "<think>\n" : "",
                        thinks ? t->reasoning : "", thinks ? "\n</think>\n\n" : "", t->content);
        else
            ok = append(&b, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", t->role, t->content);
    }
    if (ok && gen && chatml) /* Qwen3's enable_thinking=false pre-fills an empty think block */
        ok = append(&b, "<|im_start|>assistant\n%s", qwen3 && think == 0 ? "<think>\n\n</think>\n\n" : "");
    else if (ok && gen && llama3)
        ok = append(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    else if (ok && gen && gemma)
        ok = append(&b, "<start_of_turn>model\n");
    if (!ok) {
        base_free(b.s);
        return base_fail(err, ETCH_ERR_NOMEM, "out of memory rendering the chat");
    }
    *out = b.s;
    return ETCH_OK;
}

etch_status rt_chat_render_turns(const char *name, const rt_chat_turn *turns, int n, int gen, int think, char **out,
                                 etch_error *err) {
    return render(name, turns, n, gen, think, 0, out, NULL, err);
}

etch_status rt_chat_render_after_answer(const char *name, const rt_chat_turn *turns, int n, int think, char **out,
                                        size_t *marker_len, etch_error *err) {
    return render(name, turns, n, 1, think, 1, out, marker_len, err);
}

const char *rt_chat_end_token(const char *name) {
    if (!strcmp(name, "chatml") || !strcmp(name, "qwen3")) return "<|im_end|>";
    if (!strcmp(name, "llama3")) return "<|eot_id|>";
    if (!strcmp(name, "gemma")) return "<end_of_turn>";
    return NULL;
}

/* The template a call uses: the options' name, else the program's; NULL after a message when none. */
static const char *template_of(const etch_program *p, const etch_chat_options *o, etch_error *err) {
    const char *name = o && o->template_name ? o->template_name : p->meta.chat_template;
    if (!name || !*name || !strcmp(name, "none")) {
        base_fail(err, ETCH_ERR_UNSUPPORTED,
                  "this program has no chat template: name one with --chat-template (%s) or run without --chat",
                  rt_chat_template_list);
        return NULL;
    }
    return name;
}

etch_status etch_chat_render_messages(const etch_program *p, const etch_chat_message *messages, int32_t n,
                                      int add_generation_prompt, const etch_chat_options *opt, char **out,
                                      etch_error *err) {
    base_clear(err);
    if (!p || !out || (n && !messages) || n < 0) return base_fail(err, ETCH_ERR_ARG, "etch_chat_render_messages: bad argument");
    *out = NULL;
    const char *name = template_of(p, opt, err);
    if (!name) return err ? err->status : ETCH_ERR_UNSUPPORTED;
    for (int32_t i = 0; i < n; i++)
        if (!messages[i].role || !messages[i].content ||
            (strcmp(messages[i].role, "system") && strcmp(messages[i].role, "user") && strcmp(messages[i].role, "assistant")))
            return base_fail(err, ETCH_ERR_ARG, "message %d needs a role (system, user or assistant) and a content", i);
    return rt_chat_render_turns(name, messages, n, add_generation_prompt, opt ? opt->think : -1, out, err);
}

etch_status etch_chat_render(const etch_program *p, const char *user, const etch_chat_options *opt, char **out,
                             etch_error *err) {
    base_clear(err);
    if (!p || !user || !out) return base_fail(err, ETCH_ERR_ARG, "etch_chat_render: NULL argument");
    *out = NULL;
    const char *name = template_of(p, opt, err);
    if (!name) return err ? err->status : ETCH_ERR_UNSUPPORTED;
    const char *system = opt ? opt->system : NULL;
    rt_chat_turn turns[2] = {{"system", system, NULL}, {"user", user, NULL}};
    return system ? rt_chat_render_turns(name, turns, 2, 1, opt->think, out, err)
                  : rt_chat_render_turns(name, turns + 1, 1, 1, opt ? opt->think : -1, out, err);
}
