// The peer's side of bench/vs_llamacpp.sh: llama.cpp (npm node-llama-cpp, its prebuilt CPU build)
// on a GGUF. For each prompt length: one untimed warm-up, then REPS timed runs of "prefill the prompt
// as one batch, then decode N tokens greedily", timing the two phases apart. One JSON line per run.
// usage: node llamacpp.mjs MODEL.gguf THREADS PROMPT_LENGTHS(comma) N_GEN REPS [KV]
// KV: the KV cache, f16 (llama.cpp's default), f32, or q8_0 (keys and values; llama.cpp then needs
// flash attention, which is switched on for it).
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
const [model, threadsS, lensS, nGenS, repsS, kvArg] = process.argv.slice(2);
const kv = kvArg || "f16";
if (!["f16", "f32", "q8_0"].includes(kv)) throw new Error(`KV is f16, f32 or q8_0, not ${kv}`);
const threads = parseInt(threadsS), lens = lensS.split(",").map(Number), nGen = parseInt(nGenS), reps = parseInt(repsS);
const llama = await getLlama({gpu: false, build: "never", maxThreads: threads, logLevel: LlamaLogLevel.error});
const m = await llama.loadModel({modelPath: model, gpuLayers: 0});
const text = "The history of computing is a story of ideas that took decades to become practical. ".repeat(200);
const all = m.tokenize(text);
const maxLen = Math.max(...lens);
const ctx = await m.createContext({contextSize: Math.ceil((maxLen + nGen + 8) / 256) * 256, batchSize: maxLen, threads,
  experimentalKvCacheKeyType: kv, experimentalKvCacheValueType: kv, flashAttention: kv === "q8_0"});
const seq = ctx.getSequence();
const median = xs => { const v = [...xs].sort((a, b) => a - b), h = v.length >> 1; return v.length % 2 ? v[h] : (v[h - 1] + v[h]) / 2; };
for (const n of lens) {
  const prompt = all.slice(0, n);
  const pp = [], tg = [], ttft = [];
  for (let r = -1; r < reps; r++) {
    await seq.clearHistory();
    const t0 = performance.now();
    let t1 = 0, count = 0;
    for await (const tok of seq.evaluate(prompt, {temperature: 0})) {
      if (count === 0) t1 = performance.now();
      if (++count > nGen) break;
    }
    const t2 = performance.now();
    if (r < 0) continue;
    pp.push(n / ((t1 - t0) / 1000)), tg.push(nGen / ((t2 - t1) / 1000)), ttft.push(t1 - t0);
  }
  console.log(JSON.stringify({impl: "llama.cpp", n_prompt: n, n_gen: nGen, threads, prefill_tok_s: median(pp),
    decode_tok_s: median(tg), ttft_batched_ms: median(ttft), reps, kv_type: kv, release: llama.llamaCppRelease.release}));
}
await ctx.dispose(); await m.dispose(); await llama.dispose();
