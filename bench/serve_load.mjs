// The load of bench/serve.sh: for 1, 2 and 4 concurrent clients, each sending streamed completions
// back to back for SECONDS, requests/s and the time to the first streamed token (p50, p99); then one
// client's TTFT against etch run's (RUN_TTFT_MS) on the same prompt.
const [port, prompt, seconds, maxTokens, runTtft] = process.argv.slice(2);
const url = `http://127.0.0.1:${port}/v1/completions`;
async function once(p) {
  const t0 = performance.now();
  const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: p, max_tokens: Number(maxTokens), stream: true }) });
  const reader = res.body.getReader();
  let first = 0, buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += new TextDecoder().decode(value);
    if (!first && /"text":"[^"]/.test(buf)) first = performance.now() - t0;
  }
  return { ttft: first, total: performance.now() - t0, status: res.status };
}
const pct = (v, q) => v.slice().sort((a, b) => a - b)[Math.min(v.length - 1, Math.floor(q * v.length))];
console.log("| clients | requests | requests/s | TTFT p50 ms | TTFT p99 ms |");
console.log("|---|---|---|---|---|");
for (const n of [1, 2, 4]) {
  const ttfts = [];
  const until = performance.now() + Number(seconds) * 1000, t0 = performance.now();
  await Promise.all(Array.from({ length: n }, async (_, i) => {
    // a new beginning per request: the whole prompt is prefilled each time, nothing reused by chance
    for (let k = 0; performance.now() < until; k++) {
      const r = await once(`Request ${k} of client ${i}. ${prompt}`);
      if (r.status === 200) ttfts.push(r.ttft);
    }
  }));
  const secs = (performance.now() - t0) / 1000;
  console.log(`| ${n} | ${ttfts.length} | ${(ttfts.length / secs).toFixed(2)} | ${pct(ttfts, 0.5).toFixed(1)} | ${pct(ttfts, 0.99).toFixed(1)} |`);
}
const alone = [];
for (let k = 0; k < 5; k++) alone.push((await once(`Alone ${k}. ${prompt}`)).ttft);
const best = Math.min(...alone);
console.log(`\nserver overhead: TTFT ${best.toFixed(1)} ms through HTTP (best of 5, one client) against ` +
            `${Number(runTtft).toFixed(1)} ms in etch run: ${(best - runTtft).toFixed(1)} ms, ${(best / runTtft).toFixed(2)}x`);
