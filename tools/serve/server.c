/* tools/serve/server: HTTP over libmicrohttpd, a thread per connection. Routes, the API key, body
 * limits, OpenAI's error shapes, and generation: a whole answer, or server-sent events pulled one
 * token at a time, so a client that goes away frees its slot at the next token. */
#define _POSIX_C_SOURCE 200809L
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct server {
    const serve_config *cfg;
    etch_program *p;
    serve_slots slots;
    double started;
    unsigned long long next_id;
    pthread_mutex_t mu;
} server;

/* One request on one connection. */
typedef struct conn {
    server *srv;
    char *body;
    size_t len, cap;
    int too_large, started;
    const char *endpoint;
    serve_request req;
    serve_slot *slot;
    char id[48];
    double t0;
    int role_sent, final_sent, done_sent, generating, status;
    char *ev;            /* the event being written */
    size_t ev_len, ev_off;
    int refs;            /* the connection's, and a streamed response's: the last to let go frees it */
} conn;

static void conn_release(conn *k) {
    if (__atomic_sub_fetch(&k->refs, 1, __ATOMIC_ACQ_REL)) return;
    api_request_free(&k->req);
    free(k->body);
    free(k->ev);
    free(k);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Queues r (letting go of it) with the status and its content type; counts the request. Every answer
 * says how long the server keeps an idle connection (Keep-Alive: timeout, in seconds): a client that
 * knows drops it before then, where one that guessed longer (Node's fetch keeps 4 s) could send its
 * next request down a connection the server was closing, and lose it (a POST is not retried). */
static enum MHD_Result queue(struct MHD_Connection *c, conn *k, int status, struct MHD_Response *r, const char *type) {
    char keep[32];
    snprintf(keep, sizeof keep, "timeout=%d", k->srv->cfg->timeout_s);
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Keep-Alive", keep);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    k->status = status;
    return ret;
}

/* Queues body (taking it) with the status. */
static enum MHD_Result reply(struct MHD_Connection *c, conn *k, int status, char *body, const char *type) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(body ? strlen(body) : 0, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    if (status == 429 || status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    return queue(c, k, status, r, type);
}

static enum MHD_Result error_reply(struct MHD_Connection *c, conn *k, int status, const char *message, const char *type,
                                   const char *code) {
    return reply(c, k, status, api_error(message, type, code), "application/json");
}

/* Whether the client closed its end (a non-streaming answer checks between tokens). */
static int client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* The finished generation's stats into the metrics, and the slot back to the pool. */
static void finish_request(conn *k) {
    if (!k->slot) return;
    if (k->generating) etch_generate_stop(k->slot->s);
    const etch_stats *st = etch_session_stats(k->slot->s);
    metrics_tokens(st->prompt_tokens, st->reused_tokens, st->generated_tokens);
    if (st->generated_tokens > 0) metrics_ttft(st->first_token_ms - st->inference_start_ms);
    slots_release(&k->srv->slots, k->slot);
    k->slot = NULL;
    k->generating = 0;
}

/* ------------------------------------------------------------------ streaming */

/* The next event of a stream into k->ev: the role, a token's text, the final chunk, [DONE]. 0 at the
 * end of the stream, -1 on an error. */
static int next_event(conn *k) {
    const char *model = k->srv->cfg->model_name;
    free(k->ev);
    k->ev = NULL, k->ev_len = k->ev_off = 0;
    if (k->req.chat && !k->role_sent) {
        k->role_sent = 1;
        k->ev = api_chunk(&k->req, k->id, model, "", 0, 1, NULL);
    } else if (k->generating) {
        for (;;) {
            int32_t tok;
            const char *t;
            size_t n;
            if (etch_generate_next(k->slot->s, &tok, &t, &n) != ETCH_OK) return -1;
            if (tok < 0) k->generating = 0;
            if (n) {
                k->ev = api_chunk(&k->req, k->id, model, t, n, 0, NULL);
                break;
            }
            if (tok < 0) return next_event(k); /* nothing held back: on to the final chunk */
        }
    } else if (!k->final_sent) {
        k->final_sent = 1;
        k->ev = api_chunk(&k->req, k->id, model, "", 0, 0, etch_session_stats(k->slot->s));
        /* the slot's work ends here: released before the client can read [DONE] and send its next
         * turn, which should find the slot that holds its history free */
        finish_request(k);
    } else if (!k->done_sent) {
        k->done_sent = 1;
        k->ev = strdup("data: [DONE]\n\n");
    } else {
        return 0;
    }
    if (!k->ev) return -1;
    k->ev_len = strlen(k->ev);
    return 1;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    conn *k = cls;
    if (k->ev_off == k->ev_len) {
        int r = next_event(k);
        if (r == 0) {
            finish_request(k);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (r < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = k->ev_len - k->ev_off < max ? k->ev_len - k->ev_off : max;
    memcpy(buf, k->ev + k->ev_off, n);
    k->ev_off += n;
    return (ssize_t)n;
}

static void stream_done(void *cls) { /* the stream ended, or the client went away */
    conn *k = cls;
    finish_request(k);
    conn_release(k); /* the response may outlive the request's completion */
}

/* ------------------------------------------------------------------ generation */

static enum MHD_Result generate(struct MHD_Connection *c, conn *k) {
    server *srv = k->srv;
    const etch_method_meta *m = etch_program_meta(srv->p);
    char why[512];
    int st = api_parse(&k->req, !strcmp(k->endpoint, "chat"), k->body ? k->body : "", k->len,
                       srv->cfg->max_tokens_default, m->max_context_len, why, sizeof why);
    if (st) return error_reply(c, k, 400, why, "invalid_request_error", NULL);
    /* The prompt's ids before queueing: bad text is refused at once, and they choose the slot. */
    char *text = NULL;
    etch_error err;
    if (k->req.chat) {
        if (etch_chat_render_messages(srv->p, k->req.msgs, k->req.n_msgs, 1, NULL, &text, &err) != ETCH_OK)
            return error_reply(c, k, 400, err.message, "invalid_request_error", NULL);
    }
    const char *prompt = k->req.chat ? text : k->req.prompt;
    int32_t *ids = NULL, n_ids = 0;
    etch_status ts = etch_tokenize(srv->p, prompt, strlen(prompt), 1, &ids, &n_ids, &err);
    etch_free(text);
    if (ts) return error_reply(c, k, 400, err.message, "invalid_request_error", NULL);
    if (n_ids >= m->max_context_len) {
        etch_free(ids);
        snprintf(why, sizeof why, "the prompt has %d tokens, and this model's context holds %d", n_ids,
                 m->max_context_len);
        return error_reply(c, k, 400, why, "invalid_request_error", "context_length_exceeded");
    }
    int full;
    k->slot = slots_acquire(&srv->slots, ids, n_ids, 30, &full);
    etch_free(ids);
    if (!k->slot)
        return full ? error_reply(c, k, 429, "every slot is busy and the queue is full: retry later", "rate_limit_error",
                                  NULL)
                    : error_reply(c, k, 503, "no slot came free within 30 s: retry later", "server_error", NULL);
    pthread_mutex_lock(&srv->mu);
    snprintf(k->id, sizeof k->id, "%s-%llx%llx", k->req.chat ? "chatcmpl" : "cmpl", (unsigned long long)time(NULL),
             ++srv->next_id);
    pthread_mutex_unlock(&srv->mu);
    etch_session *s = k->slot->s;
    etch_status gs = k->req.chat ? etch_chat_start(s, k->req.msgs, k->req.n_msgs, NULL, &k->req.cfg)
                                 : etch_generate_start(s, k->req.prompt, &k->req.cfg);
    if (gs) {
        snprintf(why, sizeof why, "%s", etch_session_error(s));
        finish_request(k);
        int bad = gs == ETCH_ERR_TEXT || gs == ETCH_ERR_CONTEXT || gs == ETCH_ERR_LIMIT || gs == ETCH_ERR_ARG;
        return error_reply(c, k, bad ? 400 : 500, why, bad ? "invalid_request_error" : "server_error",
                           gs == ETCH_ERR_CONTEXT ? "context_length_exceeded" : NULL);
    }
    k->generating = 1;
    if (k->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, k, stream_done);
        if (!r) {
            finish_request(k);
            return MHD_NO;
        }
        __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL); /* stream_done lets go of it */
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        return queue(c, k, 200, r, "text/event-stream");
    }
    /* The whole answer, checking between tokens that the client is still there. */
    size_t len = 0, cap = 256;
    char *out = malloc(cap);
    for (int i = 0; out; i++) {
        int32_t tok;
        const char *t;
        size_t n;
        if (etch_generate_next(s, &tok, &t, &n) != ETCH_OK) break;
        if (len + n + 1 > cap) {
            char *no = realloc(out, cap = (len + n + 1) * 2);
            if (!no) free(out);
            out = no;
            if (!out) break;
        }
        memcpy(out + len, t, n);
        len += n;
        if (tok < 0) {
            k->generating = 0;
            break;
        }
        if (i % 8 == 7 && client_gone(c)) { /* nobody to answer: the slot goes back now */
            free(out);
            finish_request(k);
            k->status = 499;
            return MHD_NO;
        }
    }
    if (!out || k->generating) {
        snprintf(why, sizeof why, "generation failed: %s", etch_session_error(s));
        free(out);
        finish_request(k);
        return error_reply(c, k, 500, why, "server_error", NULL);
    }
    char *body = api_response(&k->req, k->id, srv->cfg->model_name, out, len, etch_session_stats(s));
    free(out);
    finish_request(k);
    return reply(c, k, 200, body, "application/json");
}

/* ------------------------------------------------------------------ routing */

static int authorized(struct MHD_Connection *c, const char *key) {
    if (!key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    const char *given = h + 7;
    size_t a = strlen(given), b = strlen(key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned)(given[i] ^ key[i]); /* no early exit */
    return diff == 0;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *srv = cls;
    conn *k = *con_cls;
    if (!k) { /* the headers: route, method and key are checked before any body is read */
        k = calloc(1, sizeof *k);
        if (!k) return MHD_NO;
        k->srv = srv;
        k->refs = 1;
        k->t0 = now_ms();
        *con_cls = k;
        int post = !strcmp(method, MHD_HTTP_METHOD_POST), get = !strcmp(method, MHD_HTTP_METHOD_GET);
        k->endpoint = !strcmp(url, "/v1/chat/completions") ? "chat"
                      : !strcmp(url, "/v1/completions")    ? "completions"
                      : !strcmp(url, "/v1/models")         ? "models"
                      : !strcmp(url, "/health")            ? "health"
                      : !strcmp(url, "/metrics")           ? "metrics"
                      : !strcmp(url, "/")                  ? "page"
                                                           : "other";
        int api = !strncmp(url, "/v1/", 4);
        if (!strcmp(k->endpoint, "other")) {
            char msg[300];
            snprintf(msg, sizeof msg, "no such path: %.200s", url);
            return error_reply(c, k, 404, msg, "invalid_request_error", "not_found");
        }
        int wants_post = !strcmp(k->endpoint, "chat") || !strcmp(k->endpoint, "completions");
        if ((wants_post && !post) || (!wants_post && !get))
            return error_reply(c, k, 405, wants_post ? "use POST" : "use GET", "invalid_request_error", NULL);
        if (api && !authorized(c, srv->cfg->api_key))
            return error_reply(c, k, 401, "a valid API key is needed: Authorization: Bearer KEY", "invalid_request_error",
                               "invalid_api_key");
        if (post) return MHD_YES; /* the body comes next (past the limit it is read and dropped, so the client,
                                   * still writing it, reads the 413 instead of a reset connection) */
    } else if (*upload_size) { /* a piece of the body */
        if (k->len + *upload_size > k->srv->cfg->max_body) k->too_large = 1;
        if (!k->too_large) {
            if (k->len + *upload_size + 1 > k->cap) {
                size_t cap = (k->len + *upload_size + 1) * 2;
                char *nb = realloc(k->body, cap);
                if (!nb) return MHD_NO;
                k->body = nb, k->cap = cap;
            }
            memcpy(k->body + k->len, upload, *upload_size);
            k->len += *upload_size;
            k->body[k->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->started) return MHD_YES;
    k->started = 1;
    if (k->too_large) {
        char msg[200];
        snprintf(msg, sizeof msg, "the body is larger than this server takes (%zu bytes)", srv->cfg->max_body);
        return error_reply(c, k, 413, msg, "invalid_request_error", NULL);
    }
    if (!strcmp(k->endpoint, "chat") || !strcmp(k->endpoint, "completions")) return generate(c, k);
    if (!strcmp(k->endpoint, "models")) return reply(c, k, 200, api_models(srv->cfg->model_name, srv->started), "application/json");
    if (!strcmp(k->endpoint, "metrics")) return reply(c, k, 200, metrics_text(&srv->slots), "text/plain; version=0.0.4");
    if (!strcmp(k->endpoint, "health")) {
        int busy, waiting;
        slots_load(&srv->slots, &busy, &waiting);
        char *b = malloc(160);
        if (b) snprintf(b, 160, "{\"status\": \"ok\", \"slots_idle\": %d, \"slots_busy\": %d, \"queue\": %d}",
                        srv->slots.n - busy, busy, waiting);
        return reply(c, k, 200, b, "application/json");
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(serve_page_html_len, (void *)serve_page_html,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    return queue(c, k, 200, r, "text/html; charset=utf-8");
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    (void)cls, (void)c, (void)why;
    conn *k = *con_cls;
    if (!k) return;
    if (k->refs == 1) finish_request(k); /* with a stream still held, its free callback does this */
    metrics_request(k->endpoint ? k->endpoint : "other", k->status);
    *con_cls = NULL;
    conn_release(k);
}

static void log_error(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fputs("etch serve: ", stderr);
    vfprintf(stderr, fmt, ap);
}

int serve_run(const serve_config *cfg) {
    server srv = {cfg, NULL, {0}, (double)time(NULL), 0, PTHREAD_MUTEX_INITIALIZER};
    etch_error err;
    if (etch_program_open(cfg->program_path, &srv.p, &err) != ETCH_OK) {
        fprintf(stderr, "etch serve: %s\n", err.message);
        return 1;
    }
    /* The sessions' memory is counted against most of the machine's, so a slot that cannot be
     * backed is refused here, not by the kernel's out-of-memory killer later. */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) etch_set_memory_budget((int64_t)pages * page / 10 * 9);
    etch_session_options so = {cfg->threads, cfg->kv_type};
    if (slots_init(&srv.slots, srv.p, cfg->n_slots, cfg->queue, &so, &err) != ETCH_OK) {
        fprintf(stderr, "etch serve: %s\n", err.message);
        etch_program_close(srv.p);
        return 1;
    }
    for (int i = 0; i < cfg->n_slots; i++) {
        etch_limits lim = {(int64_t)cfg->max_body, 0, 0};
        etch_session_set_limits(srv.slots.v[i].s, &lim);
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &addr.sin_addr) != 1) {
        fprintf(stderr, "etch serve: --host %s is not an IPv4 address\n", cfg->host);
        slots_free(&srv.slots);
        etch_program_close(srv.p);
        return 2;
    }
    /* SIGINT and SIGTERM go to this thread alone (blocked before the server's threads start). */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)cfg->port, NULL,
        NULL, handle, &srv, MHD_OPTION_EXTERNAL_LOGGER, log_error, NULL, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)cfg->timeout_s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(cfg->n_slots + cfg->queue + 16),
        MHD_OPTION_NOTIFY_COMPLETED, completed, &srv, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "etch serve: cannot listen on %s:%d: %s\n", cfg->host, cfg->port, strerror(errno));
        slots_free(&srv.slots);
        etch_program_close(srv.p);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "etch serve: %s on http://%s:%u with %d slot%s (queue %d)%s\n", cfg->model_name, cfg->host,
            info ? info->port : (unsigned)cfg->port, cfg->n_slots, cfg->n_slots == 1 ? "" : "s", cfg->queue,
            cfg->api_key ? ", API key required" : "");
    fflush(stderr);
    int sig;
    sigwait(&stop, &sig);
    fprintf(stderr, "etch serve: stopping (%s)\n", sig == SIGINT ? "interrupt" : "terminate");
    for (int i = 0; i < srv.slots.n; i++) etch_session_cancel(srv.slots.v[i].s); /* answers end at their next token */
    MHD_stop_daemon(d);
    slots_free(&srv.slots);
    etch_program_close(srv.p);
    return 0;
}
