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
#define RT_TEMPLATES(X, SEP) X("chatml") SEP X("qwen3") SEP X("llama3") SEP X("llama2")
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

etch_status rt_chat_render_turns(const char *name, const rt_chat_turn *turns, int n, int gen, int think, char **out,
                                 etch_error *err) {
    *out = NULL;
    if (!rt_chat_template_known(name))
        return base_fail(err, ETCH_ERR_ARG, "chat template '%s' is not one of %s", name, rt_chat_template_list);
    int qwen3 = !strcmp(name, "qwen3"), chatml = qwen3 || !strcmp(name, "chatml"), llama3 = !strcmp(name, "llama3");
    int llama2 = !strcmp(name, "llama2");
    if (think >= 0 && !qwen3)
        return base_fail(err, ETCH_ERR_ARG, "--think/--no-think need the qwen3 template (this one is %s)", name);
    for (int i = 0; llama2 && i < n; i++) /* Llama 2 alternates user and assistant after one optional system turn */
        if (!strcmp(turns[i].role, "system") ? i != 0
                                              : strcmp(turns[i].role, i % 2 == (n && !strcmp(turns[0].role, "system"))
                                                                          ? "user" : "assistant"))
            return base_fail(err, ETCH_ERR_UNSUPPORTED,
                             "the llama2 template takes an optional system turn first, then user and assistant turns "
                             "in turn (turn %d is %s)", i, turns[i].role);
    text_buf b = {base_malloc(256), 0, 256};
    if (!b.s) return base_fail(err, ETCH_ERR_NOMEM, "out of memory rendering the chat");
    b.s[0] = '\0';
    int ok = 1;
    if (llama2) { /* [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] user [/INST] ...: the
                   * first BOS is generation's, the later ones are text (special tokens, as the Jinja writes them) */
        int sys = n && !strcmp(turns[0].role, "system");
        for (int i = sys; i < n && ok; i++) {
            const rt_chat_turn *t = &turns[i];
            if (!strcmp(t->role, "assistant")) ok = append(&b, " %s </s>", t->content);
            else
                ok = append(&b, "%s[INST] %s%s%s%s [/INST]", i > sys ? "<s>" : "",
                            i == sys && sys ? "<<SYS>>\n" : "", i == sys && sys ? turns[0].content : "",
                            i == sys && sys ? "\n<</SYS>>\n\n" : "", t->content);
        }
    }
    for (int i = 0; i < n && ok && !llama2; i++) {
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
    if (!ok) {
        base_free(b.s);
        return base_fail(err, ETCH_ERR_NOMEM, "out of memory rendering the chat");
    }
    *out = b.s;
    return ETCH_OK;
}

etch_status etch_chat_render(const etch_program *p, const char *user, const etch_chat_options *opt, char **out,
                             etch_error *err) {
    base_clear(err);
    if (!p || !user || !out) return base_fail(err, ETCH_ERR_ARG, "etch_chat_render: NULL argument");
    *out = NULL;
    etch_chat_options o = {NULL, -1, NULL};
    if (opt) o = *opt;
    const char *name = o.template_name ? o.template_name : p->meta.chat_template;
    if (!name || !*name || !strcmp(name, "none"))
        return base_fail(err, ETCH_ERR_UNSUPPORTED,
                         "this program has no chat template: name one with --chat-template (%s) or run without "
                         "--chat", rt_chat_template_list);
    rt_chat_turn turns[2] = {{"system", o.system, NULL}, {"user", user, NULL}};
    return o.system ? rt_chat_render_turns(name, turns, 2, 1, o.think, out, err)
                    : rt_chat_render_turns(name, turns + 1, 1, 1, o.think, out, err);
}
