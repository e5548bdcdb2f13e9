/* runtime: chat templates, rendered natively. The exporter recognizes a model's Jinja template
 * by its markers and records its name; each name here writes the same text the Jinja template
 * writes for a list of turns (an optional system message and one user turn with the generation
 * prompt for etch_chat_render; whole conversations with answers for calibration samples). */
#include "runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends printf output to s (capacity cap, length *len); 0 when it did not fit. */
static int append(char *s, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int append(char *s, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap - *len) return 0;
    *len += (size_t)n;
    return 1;
}

etch_status rt_chat_render_turns(const char *name, const rt_chat_turn *turns, int n, int gen, int think, char **out,
                                 etch_error *err) {
    *out = NULL;
    int qwen3 = !strcmp(name, "qwen3"), chatml = qwen3 || !strcmp(name, "chatml"), llama3 = !strcmp(name, "llama3");
    int llama2 = !strcmp(name, "llama2");
    if (!chatml && !llama3 && !llama2)
        return base_fail(err, ETCH_ERR_ARG, "chat template '%s' is not one of chatml, qwen3, llama3, llama2", name);
    if (think >= 0 && !qwen3)
        return base_fail(err, ETCH_ERR_ARG, "--think/--no-think need the qwen3 template (this one is %s)", name);
    if (llama2 && (n > 2 || (n == 2 && strcmp(turns[0].role, "system")) || (n && strcmp(turns[n - 1].role, "user"))))
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "the llama2 template renders a system turn and one user turn only");
    size_t cap = 128;
    for (int i = 0; i < n; i++)
        cap += strlen(turns[i].content) + (turns[i].reasoning ? strlen(turns[i].reasoning) : 0) + 64;
    char *s = base_malloc(cap);
    if (!s) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    size_t len = 0;
    int ok = 1;
    s[0] = '\0';
    if (llama2) { /* [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] */
        const char *sys = n == 2 ? turns[0].content : NULL, *user = n ? turns[n - 1].content : "";
        ok = append(s, cap, &len, "[INST] %s%s%s%s [/INST]", sys ? "<<SYS>>\n" : "", sys ? sys : "",
                    sys ? "\n<</SYS>>\n\n" : "", user);
    }
    for (int i = 0; i < n && ok && !llama2; i++) {
        const rt_chat_turn *t = &turns[i];
        int thinks = qwen3 && t->reasoning && !strcmp(t->role, "assistant");
        if (chatml)
            ok = append(s, cap, &len, "<|im_start|>%s\n%s%s%s%s<|im_end|>\n", t->role, thinks ? "<think>\n" : "",
                        thinks ? t->reasoning : "", thinks ? "\n</think>\n\n" : "", t->content);
        else
            ok = append(s, cap, &len, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", t->role, t->content);
    }
    if (ok && gen && chatml) /* Qwen3's enable_thinking=false pre-fills an empty think block */
        ok = append(s, cap, &len, "<|im_start|>assistant\n%s", qwen3 && think == 0 ? "<think>\n\n</think>\n\n" : "");
    else if (ok && gen && llama3)
        ok = append(s, cap, &len, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    if (!ok) {
        base_free(s);
        return base_fail(err, ETCH_ERR_NOMEM, "chat rendering overflow");
    }
    *out = s;
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
                         "this program has no chat template: name one (chatml, qwen3, llama3, llama2) or run without chat");
    rt_chat_turn turns[2] = {{"system", o.system, NULL}, {"user", user, NULL}};
    return o.system ? rt_chat_render_turns(name, turns, 2, 1, o.think, out, err)
                    : rt_chat_render_turns(name, turns + 1, 1, 1, o.think, out, err);
}
