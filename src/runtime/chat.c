/* runtime: chat templates, rendered natively. The exporter recognizes a model's Jinja template
 * by its markers and records its name; each name here writes the same text the Jinja template
 * writes for one optional system message and one user turn with the generation prompt. */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const char *sys = o.system;
    size_t need = strlen(user) + (sys ? strlen(sys) : 0) + 256;
    char *s = base_malloc(need);
    if (!s) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    int n;
    if (!strcmp(name, "qwen3") || !strcmp(name, "chatml")) {
        /* ChatML; Qwen3's enable_thinking=false pre-fills an empty think block. */
        n = snprintf(s, need, "%s%s%s<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n%s",
                     sys ? "<|im_start|>system\n" : "", sys ? sys : "", sys ? "<|im_end|>\n" : "", user,
                     !strcmp(name, "qwen3") && o.think == 0 ? "<think>\n\n</think>\n\n" : "");
    } else if (!strcmp(name, "llama3")) {
        n = snprintf(s, need, "%s%s%s<|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n",
                     sys ? "<|start_header_id|>system<|end_header_id|>\n\n" : "", sys ? sys : "", sys ? "<|eot_id|>" : "",
                     user);
    } else if (!strcmp(name, "llama2")) {
        n = snprintf(s, need, "[INST] %s%s%s%s [/INST]", sys ? "<<SYS>>\n" : "", sys ? sys : "", sys ? "\n<</SYS>>\n\n" : "",
                     user);
    } else {
        base_free(s);
        return base_fail(err, ETCH_ERR_ARG, "chat template '%s' is not one of chatml, qwen3, llama3, llama2", name);
    }
    if (n < 0 || (size_t)n >= need) {
        base_free(s);
        return base_fail(err, ETCH_ERR_NOMEM, "chat rendering overflow");
    }
    if (o.think >= 0 && strcmp(name, "qwen3") != 0) {
        base_free(s);
        return base_fail(err, ETCH_ERR_ARG, "--think/--no-think need the qwen3 template (this one is %s)", name);
    }
    *out = s;
    return ETCH_OK;
}
