// Runs llama.cpp (node-llama-cpp's prebuilt CPU build) on a GGUF for a list of prompts given as
// token ids: greedy continuation of N tokens, and the log-probabilities of the K most probable next
// tokens after the prompt. F32 KV cache and flash attention off (its CPU kernel computes in f16
// whatever the cache type), so an f32 model is compared at f32 precision.
// usage: node llamacpp.mjs MODEL.gguf prompts_ids.json N K > out.json
import fs from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
const [modelPath, promptsPath, nGenS, topKS] = process.argv.slice(2);
const nGen = parseInt(nGenS), topK = parseInt(topKS);
const prompts = JSON.parse(fs.readFileSync(promptsPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const maxLen = Math.max(...prompts.map(p => p.length));
const context = await model.createContext({
  contextSize: Math.ceil((maxLen + nGen + 8) / 256) * 256, batchSize: maxLen, threads: 1, sequences: 1, flashAttention: false,
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
});
const seq = context.getSequence();
const out = [];
for (const ids of prompts) {
  await seq.clearHistory();
  const gen = [];
  for await (const t of seq.evaluate(ids, {temperature: 0, yieldEogToken: true})) { gen.push(t); if (gen.length >= nGen) break; }
  await seq.clearHistory();
  let top = [];
  for await (const o of seq.evaluateWithMetadata(ids, {probabilities: true}, {temperature: 0})) {
    top = [...o.probabilities.entries()].slice(0, topK).map(([id, p]) => [id, Math.log(p)]);
    break;
  }
  out.push({prompt: ids, generated: gen, top_logprobs: top});
}
process.stdout.write(JSON.stringify({llama_cpp: llama.llamaCppRelease.release, results: out}));
await context.dispose(); await model.dispose(); await llama.dispose();
