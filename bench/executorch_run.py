"""ExecuTorch's own LLM runner (TextLLMRunner, the C++ runner behind `llama_main`, through its
Python binding) on one exported .pte: one JSON line per repetition with the runner's statistics,
the same fields as `etch bench --json`. Used by bench/vs_executorch.sh; run with the venv that
holds executorch. Arguments: MODEL.pte TOKENIZER.json PROMPT_TOKENS GEN_TOKENS REPS."""
import json
import resource
import sys

# the operators the XNNPACK recipe leaves outside the delegate (custom SDPA, KV-cache update, 4-bit
# embedding) live in these libraries; importing them registers their kernels with the runtime
import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
from executorch.kernels import quantized  # noqa: F401


def main():
    pte, tokenizer, n_prompt, n_gen, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    runner = TextLLMRunner(pte, tokenizer)
    # " the" is one token of Qwen3's vocabulary: the prompt is exactly n_prompt tokens (checked below)
    prompt = " the" * n_prompt
    for rep in range(reps + 1):  # the first run warms the caches and is not reported
        stats = []
        config = GenerationConfig(max_new_tokens=n_gen, echo=False, temperature=0.0, seq_len=n_prompt + n_gen + 1)
        runner.generate(prompt, config, token_callback=lambda s: None, stats_callback=stats.append)
        runner.reset()
        s = stats[-1]
        if s.num_prompt_tokens != n_prompt:
            sys.exit(f"executorch_run: the prompt became {s.num_prompt_tokens} tokens, not {n_prompt}")
        if rep == 0:
            continue
        prefill_ms = s.prompt_eval_end_ms - s.inference_start_ms
        decode_ms = s.inference_end_ms - s.prompt_eval_end_ms
        print(json.dumps({
            "impl": "executorch", "n_prompt": s.num_prompt_tokens, "n_gen": s.num_generated_tokens,
            "prefill_tok_s": 1000.0 * s.num_prompt_tokens / prefill_ms,
            "decode_tok_s": 1000.0 * s.num_generated_tokens / decode_ms if decode_ms > 0 else 0.0,  # the tokens after the first
            "ttft_batched_ms": float(s.first_token_ms - s.inference_start_ms),
            "load_ms": float(s.model_load_end_ms - s.model_load_start_ms),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        }), flush=True)


main()
