/* runtime/stats: ExecuTorch's report of a generation: the PyTorchObserver line and the human table
 * (docs/STATS.md says what each field means). */
#include "runtime.h"

#include <stdio.h>

static double rate(double tokens, double ms) { return ms > 0.0 ? tokens / ms * 1000.0 : 0.0; }

int etch_stats_observer_line(const etch_stats *st, char *buf, size_t cap) {
    double prefill_ms = st->prompt_eval_end_ms - st->inference_start_ms;
    double decode_ms = st->inference_end_ms - st->prompt_eval_end_ms;
    /* Integer milliseconds, as ExecuTorch's runner writes them; the rates use the exact times. */
    return snprintf(buf, cap,
                    "PyTorchObserver {\"prompt_tokens\": %lld, \"generated_tokens\": %lld, "
                    "\"model_load_start_ms\": %lld, \"model_load_end_ms\": %lld, \"inference_start_ms\": %lld, "
                    "\"token_encode_end_ms\": %lld, \"model_execution_start_ms\": %lld, "
                    "\"model_execution_end_ms\": %lld, \"inference_end_ms\": %lld, \"prompt_eval_end_ms\": %lld, "
                    "\"first_token_ms\": %lld, \"aggregate_sampling_time_ms\": %lld, "
                    "\"SCALING_FACTOR_UNITS_PER_SECOND\": 1000, \"prefill_token_per_sec\": %.3f, "
                    "\"decode_token_per_sec\": %.3f, \"prefill\": \"%s\", \"prefill_chunks\": %d, \"reused_tokens\": %lld}",
                    (long long)st->prompt_tokens, (long long)st->generated_tokens,
                    (long long)st->model_load_start_ms, (long long)st->model_load_end_ms,
                    (long long)st->inference_start_ms, (long long)st->token_encode_end_ms,
                    (long long)st->model_execution_start_ms, (long long)st->model_execution_end_ms,
                    (long long)st->inference_end_ms, (long long)st->prompt_eval_end_ms,
                    (long long)st->first_token_ms, (long long)st->aggregate_sampling_time_ms,
                    rate((double)st->prompt_tokens, prefill_ms), rate((double)st->generated_tokens, decode_ms),
                    st->prefill_used == ETCH_PREFILL_SEQUENTIAL ? "sequential" : "batched", st->n_chunks,
                    (long long)st->reused_tokens);
}

int etch_stats_report(const etch_stats *st, char *buf, size_t cap) {
    double inf_ms = st->inference_end_ms - st->inference_start_ms;
    double prompt_ms = st->prompt_eval_end_ms - st->inference_start_ms;
    double gen_ms = st->inference_end_ms - st->prompt_eval_end_ms;
    double gen = (double)st->generated_tokens;
    return snprintf(buf, cap,
                    "\tPrompt Tokens: %lld Generated Tokens: %lld\n"
                    "\tModel Load Time:\t\t%f (seconds)\n"
                    "\tTotal inference time:\t\t%f (seconds)\t\t Rate: \t%f (tokens/second)\n"
                    "\t\tPrompt evaluation:\t%f (seconds)\t\t Rate: \t%f (tokens/second)\n"
                    "\t\tGenerated %lld tokens:\t%f (seconds)\t\t Rate: \t%f (tokens/second)\n"
                    "\tTime to first generated token:\t%f (seconds)\n"
                    "\tSampling time over %lld tokens:\t%f (seconds)\n",
                    (long long)st->prompt_tokens, (long long)st->generated_tokens,
                    (st->model_load_end_ms - st->model_load_start_ms) / 1000.0, inf_ms / 1000.0, rate(gen, inf_ms),
                    prompt_ms / 1000.0, rate((double)st->prompt_tokens, prompt_ms), (long long)st->generated_tokens,
                    gen_ms / 1000.0, rate(gen, gen_ms), (st->first_token_ms - st->inference_start_ms) / 1000.0,
                    (long long)(st->prompt_tokens + st->generated_tokens), st->aggregate_sampling_time_ms / 1000.0);
}
