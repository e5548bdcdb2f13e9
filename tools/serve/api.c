/* tools/serve/api: OpenAI's request and response shapes for /v1/chat/completions and
 * /v1/completions, read and written with cJSON. Fields OpenAI defines that etch cannot honour with
 * the value given (n > 1, tools, log-probabilities, penalties) are refused by name, and so is a field
 * OpenAI does not define: a client learns at once, not from a quietly different answer. */
#define _POSIX_C_SOURCE 200809L
#include "serve.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(char *why, size_t cap, const char *fmt, const char *arg) {
    snprintf(why, cap, fmt, arg);
    return 400;
}

/* A message's content: a string, or OpenAI's array of parts, whose text parts are joined (the joined
 * string replaces the array in the JSON, which owns it). NULL when neither. */
static const char *content_of(cJSON *m) {
    cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (cJSON_IsString(c)) return c->valuestring;
    if (!cJSON_IsArray(c)) return NULL;
    size_t len = 0;
    for (cJSON *p = c->child; p; p = p->next) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(t)) return NULL; /* images and audio are not for this model */
        len += strlen(t->valuestring);
    }
    char *joined = malloc(len + 1);
    if (!joined) return NULL;
    joined[0] = '\0';
    for (cJSON *p = c->child; p; p = p->next) strcat(joined, cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
    cJSON *s = cJSON_CreateString(joined);
    free(joined);
    if (!s) return NULL;
    cJSON_ReplaceItemInObjectCaseSensitive(m, "content", s);
    return s->valuestring;
}

int api_parse(serve_request *r, int chat, const char *body, size_t len, int max_tokens_default, int max_context,
              char *why, size_t cap) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    etch_generate_config_default(&r->cfg);
    r->cfg.max_new_tokens = max_tokens_default;
    r->cfg.cache = ETCH_CACHE_REUSE;
    cJSON *j = cJSON_ParseWithLength(body, len);
    r->json = j;
    if (!j) return fail(why, cap, "the body is not valid JSON%s", "");
    if (!cJSON_IsObject(j)) return fail(why, cap, "the body is JSON but not an object%s", "");
    static const char *known_chat[] = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature",
                                       "top_p", "top_k", "seed", "stop", "stream", "stream_options", "n", "user",
                                       "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs",
                                       "response_format", "tools", "tool_choice", "parallel_tool_calls", "metadata",
                                       "store", NULL};
    static const char *known_completion[] = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed",
                                             "stop", "stream", "stream_options", "n", "user", "echo", "logprobs",
                                             "presence_penalty", "frequency_penalty", "best_of", "suffix", NULL};
    for (cJSON *f = j->child; f; f = f->next) {
        int ok = 0;
        for (const char *const *k = chat ? known_chat : known_completion; *k && !ok; k++) ok = !strcmp(f->string, *k);
        if (!ok) return fail(why, cap, "unknown field '%s'", f->string);
    }
    cJSON *v;
    /* what OpenAI defines and etch cannot honour, unless it asks for nothing */
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "n")) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return fail(why, cap, "n must be 1: one answer per request%s", "");
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "best_of")) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return fail(why, cap, "best_of must be 1%s", "");
    static const char *zero[] = {"presence_penalty", "frequency_penalty", NULL};
    for (const char *const *k = zero; *k; k++)
        if ((v = cJSON_GetObjectItemCaseSensitive(j, *k)) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
            return fail(why, cap, "%s is not supported (only 0)", *k);
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "logprobs")) && !cJSON_IsFalse(v) && !cJSON_IsNull(v))
        return fail(why, cap, "logprobs are not supported%s", "");
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "echo")) && !cJSON_IsFalse(v))
        return fail(why, cap, "echo is not supported%s", "");
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "suffix")) && !cJSON_IsNull(v))
        return fail(why, cap, "suffix is not supported%s", "");
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "tools")) && !(cJSON_IsArray(v) && !v->child))
        return fail(why, cap, "tools are not supported%s", "");
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "response_format"))) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text"))
            return fail(why, cap, "response_format must be {\"type\": \"text\"}%s", "");
    }

    /* the sampling and length fields */
    cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
    if (!mt) mt = cJSON_GetObjectItemCaseSensitive(j, "max_completion_tokens");
    if (mt && !cJSON_IsNull(mt)) {
        if (!cJSON_IsNumber(mt) || mt->valuedouble != floor(mt->valuedouble) || mt->valuedouble < 1 ||
            mt->valuedouble > 1e9)
            return fail(why, cap, "max_tokens must be a positive integer%s", "");
        r->cfg.max_new_tokens = mt->valuedouble > max_context ? max_context : (int32_t)mt->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "temperature")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 100))
            return fail(why, cap, "temperature must be a number in 0..100%s", "");
        r->cfg.temperature = (float)v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "top_p")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 1))
            return fail(why, cap, "top_p must be a number in (0, 1]%s", "");
        r->cfg.top_p = (float)v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "top_k")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9 || v->valuedouble != floor(v->valuedouble))
            return fail(why, cap, "top_k must be a non-negative integer%s", "");
        r->cfg.top_k = (int32_t)v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "seed")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740991.0)
            return fail(why, cap, "seed must be a non-negative integer%s", "");
        r->cfg.seed = (uint64_t)v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "stop")) && !cJSON_IsNull(v)) {
        int n = 0;
        if (cJSON_IsString(v)) r->stop[n++] = v->valuestring;
        else if (cJSON_IsArray(v))
            for (cJSON *e = v->child; e; e = e->next) {
                if (!cJSON_IsString(e) || n == 4) return fail(why, cap, "stop is a string or up to 4 strings%s", "");
                r->stop[n++] = e->valuestring;
            }
        else return fail(why, cap, "stop is a string or up to 4 strings%s", "");
        for (int i = 0; i < n; i++)
            if (!r->stop[i][0]) return fail(why, cap, "a stop string is empty%s", "");
        r->cfg.stop = r->stop, r->cfg.n_stop = n;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "stream")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v)) return fail(why, cap, "stream must be true or false%s", "");
        r->stream = cJSON_IsTrue(v);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "stream_options")) && cJSON_IsObject(v))
        r->include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "include_usage"));

    if (!chat) {
        v = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        if (cJSON_IsArray(v) && v->child && !v->child->next) v = v->child; /* one prompt in a list */
        if (!cJSON_IsString(v)) return fail(why, cap, "prompt must be a string%s", "");
        r->prompt = v->valuestring;
        return 0;
    }
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    int n = cJSON_GetArraySize(msgs);
    if (!cJSON_IsArray(msgs) || n < 1) return fail(why, cap, "messages must be a non-empty array%s", "");
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    if (!r->msgs) return fail(why, cap, "out of memory%s", "");
    for (cJSON *m = msgs->child; m; m = m->next) {
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const char *content = content_of(m);
        if (!cJSON_IsString(role) || !content) return fail(why, cap, "each message needs a role and a text content%s", "");
        const char *ro = role->valuestring;
        if (!strcmp(ro, "developer")) ro = "system"; /* OpenAI's newer name for it */
        if (strcmp(ro, "system") && strcmp(ro, "user") && strcmp(ro, "assistant"))
            return fail(why, cap, "role '%s' is not supported (system, user, assistant)", role->valuestring);
        cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        r->msgs[r->n_msgs++] = (etch_chat_message){ro, content, cJSON_IsString(rc) ? rc->valuestring : NULL};
    }
    if (strcmp(r->msgs[r->n_msgs - 1].role, "user"))
        return fail(why, cap, "the last message must be the user's (it is %s)", r->msgs[r->n_msgs - 1].role);
    return 0;
}

void api_request_free(serve_request *r) {
    cJSON_Delete(r->json);
    free(r->msgs);
    memset(r, 0, sizeof *r);
}

const char *api_finish_reason(const etch_stats *st) {
    return st->stop_reason == 0 || st->stop_reason == 2 ? "length" : "stop";
}

/* The request's stats as an object: the PyTorchObserver line's fields. */
static cJSON *stats_object(const etch_stats *st) {
    char line[2048];
    etch_stats_observer_line(st, line, sizeof line);
    return cJSON_Parse(line + strlen("PyTorchObserver "));
}

static cJSON *usage_object(const etch_stats *st) {
    cJSON *u = cJSON_CreateObject();
    int64_t prompt = st->prompt_tokens + st->reused_tokens;
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)st->generated_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + st->generated_tokens));
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)st->reused_tokens);
    return u;
}

/* A string of len bytes that may hold NUL: cJSON's strings end at the first NUL, so those become
 * U+FFFD (a model's text seldom has one; the command line prints them as they are). */
static cJSON *text_string(const char *text, size_t len) {
    char *t = malloc(len * 3 + 1);
    if (!t) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i]) t[o++] = text[i];
        else memcpy(t + o, "\xEF\xBF\xBD", 3), o += 3;
    }
    t[o] = '\0';
    cJSON *s = cJSON_CreateString(t);
    free(t);
    return s;
}

static cJSON *envelope(const serve_request *r, const char *id, const char *model, int chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", r->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddStringToObject(o, "system_fingerprint", "etch-" ETCH_VERSION_STRING);
    return o;
}

char *api_response(const serve_request *r, const char *id, const char *model, const char *text, size_t len,
                   const etch_stats *st) {
    cJSON *o = envelope(r, id, model, 0), *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddItemToObject(m, "content", text_string(text, len));
    } else {
        cJSON_AddItemToObject(c, "text", text_string(text, len));
    }
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", api_finish_reason(st));
    cJSON_AddItemToObject(o, "usage", usage_object(st));
    cJSON_AddItemToObject(o, "etch", stats_object(st));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *api_chunk(const serve_request *r, const char *id, const char *model, const char *text, size_t len,
                int role_first, const etch_stats *final) {
    cJSON *o = envelope(r, id, model, 1), *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role_first) cJSON_AddStringToObject(d, "role", "assistant");
        if (len) cJSON_AddItemToObject(d, "content", text_string(text, len));
    } else {
        cJSON_AddItemToObject(c, "text", text_string(text, len));
    }
    cJSON_AddNullToObject(c, "logprobs");
    if (final) {
        cJSON_AddStringToObject(c, "finish_reason", api_finish_reason(final));
        if (r->include_usage) cJSON_AddItemToObject(o, "usage", usage_object(final));
        cJSON_AddItemToObject(o, "etch", stats_object(final));
    } else {
        cJSON_AddNullToObject(c, "finish_reason");
    }
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!body) return NULL;
    size_t bl = strlen(body);
    char *ev = malloc(bl + 9);
    if (ev) memcpy(ev, "data: ", 6), memcpy(ev + 6, body, bl), memcpy(ev + 6 + bl, "\n\n", 3);
    free(body);
    return ev;
}

char *api_error(const char *message, const char *type, const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *api_models(const char *model, double created) {
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(data, m);
    cJSON_AddStringToObject(m, "id", model);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", created);
    cJSON_AddStringToObject(m, "owned_by", "etch");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
