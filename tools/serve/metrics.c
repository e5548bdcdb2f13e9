/* tools/serve/metrics: what /metrics serves in Prometheus' text format: requests by endpoint and
 * status, tokens prefilled, reused and generated, and a histogram of the time to first token. */
#define _POSIX_C_SOURCE 200809L
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

enum { N_ENDPOINTS = 8, N_STATUS = 8 };
static const char *endpoints[N_ENDPOINTS] = {"chat", "completions", "models", "health", "metrics", "page", "other", NULL};
static const int statuses[N_STATUS] = {200, 400, 401, 404, 405, 413, 429, 503};
static uint64_t requests[N_ENDPOINTS][N_STATUS + 1]; /* the last column: any other status */
static uint64_t tok_prompt, tok_reused, tok_generated;
static const double buckets[] = {10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000};
enum { N_BUCKETS = sizeof buckets / sizeof *buckets };
static uint64_t ttft_le[N_BUCKETS], ttft_count;
static double ttft_sum;

void metrics_request(const char *endpoint, int status) {
    int e = N_ENDPOINTS - 2, k = N_STATUS;
    for (int i = 0; endpoints[i]; i++)
        if (!strcmp(endpoint, endpoints[i])) e = i;
    for (int i = 0; i < N_STATUS; i++)
        if (statuses[i] == status) k = i;
    pthread_mutex_lock(&mu);
    requests[e][k]++;
    pthread_mutex_unlock(&mu);
}

void metrics_tokens(int64_t prompt, int64_t reused, int64_t generated) {
    pthread_mutex_lock(&mu);
    tok_prompt += (uint64_t)prompt, tok_reused += (uint64_t)reused, tok_generated += (uint64_t)generated;
    pthread_mutex_unlock(&mu);
}

void metrics_ttft(double ms) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < N_BUCKETS; i++)
        if (ms <= buckets[i]) ttft_le[i]++;
    ttft_count++, ttft_sum += ms;
    pthread_mutex_unlock(&mu);
}

char *metrics_text(serve_slots *q) {
    size_t cap = 8192, at = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
#define PUT(...) (at += (size_t)snprintf(s + at, at < cap ? cap - at : 0, __VA_ARGS__))
    int busy, waiting;
    slots_load(q, &busy, &waiting);
    pthread_mutex_lock(&mu);
    PUT("# HELP etch_requests_total HTTP requests by endpoint and status.\n# TYPE etch_requests_total counter\n");
    for (int e = 0; endpoints[e]; e++)
        for (int k = 0; k <= N_STATUS; k++)
            if (requests[e][k])
                PUT("etch_requests_total{endpoint=\"%s\",status=\"%s%d\"} %llu\n", endpoints[e], k < N_STATUS ? "" : "other",
                    k < N_STATUS ? statuses[k] : 0, (unsigned long long)requests[e][k]);
    PUT("# HELP etch_tokens_total Tokens by kind: prefilled, reused from a slot's cache, generated.\n"
        "# TYPE etch_tokens_total counter\n");
    PUT("etch_tokens_total{kind=\"prompt\"} %llu\netch_tokens_total{kind=\"reused\"} %llu\n"
        "etch_tokens_total{kind=\"generated\"} %llu\n",
        (unsigned long long)tok_prompt, (unsigned long long)tok_reused, (unsigned long long)tok_generated);
    PUT("# HELP etch_time_to_first_token_ms Time from a request's start to its first token.\n"
        "# TYPE etch_time_to_first_token_ms histogram\n");
    for (int i = 0; i < N_BUCKETS; i++)
        PUT("etch_time_to_first_token_ms_bucket{le=\"%g\"} %llu\n", buckets[i], (unsigned long long)ttft_le[i]);
    PUT("etch_time_to_first_token_ms_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)ttft_count);
    PUT("etch_time_to_first_token_ms_sum %.3f\netch_time_to_first_token_ms_count %llu\n", ttft_sum,
        (unsigned long long)ttft_count);
    pthread_mutex_unlock(&mu);
    PUT("# HELP etch_slots Slots by state.\n# TYPE etch_slots gauge\netch_slots{state=\"busy\"} %d\n"
        "etch_slots{state=\"idle\"} %d\n# HELP etch_queue Requests waiting for a slot.\n# TYPE etch_queue gauge\n"
        "etch_queue %d\n",
        busy, q->n - busy, waiting);
#undef PUT
    if (at >= cap) s[cap - 1] = '\0';
    return s;
}
