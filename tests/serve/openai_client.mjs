// etch serve through OpenAI's own client library (npm openai), and through raw requests where a
// client library would refuse to send what a stranger might. Exits non-zero on any failed check.
// usage: node openai_client.mjs MAIN_PORT KEYED_PORT SLOW_PORT WORK_DIR
import OpenAI from "openai";
import fs from "node:fs";
import net from "node:net";

const [mainPort, keyPort, slowPort, work] = process.argv.slice(2);
const base = (p) => `http://127.0.0.1:${p}/v1`;
const client = new OpenAI({ baseURL: base(mainPort), apiKey: "none", maxRetries: 0 });
let passed = 0, failed = 0;
const check = (ok, what) => { if (ok) passed++; else { failed++; console.error("FAIL:", what); } };
const refCompletion = JSON.parse(fs.readFileSync(`${work}/ref-completion.json`, "utf8"));
const refChat = JSON.parse(fs.readFileSync(`${work}/ref-chat.json`, "utf8"));

// Completions: the same text as etch run, whole and streamed; usage.
const c = await client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 60 });
check(c.choices[0].text === refCompletion.text, `completion text: ${JSON.stringify(c.choices[0].text)}`);
check(c.usage.prompt_tokens === 5 && c.usage.completion_tokens === 60 && c.usage.total_tokens === 65,
      `usage ${JSON.stringify(c.usage)}`);
check(c.choices[0].finish_reason === "length", "finish_reason length");
let streamed = "";
for await (const ch of await client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 60, stream: true }))
  streamed += ch.choices[0].text;
check(streamed === refCompletion.text, "streamed completion equals etch run");

// Chat: the same tokens as `etch run --chat`, whole and streamed.
const messages = [{ role: "system", content: "You tell stories." }, { role: "user", content: "Tell me about a cat." }];
const r = await client.chat.completions.create({ model: "stories", messages, max_tokens: 40 });
check(r.choices[0].message.content === refChat.text, `chat text: ${JSON.stringify(r.choices[0].message.content)}`);
check(r.usage.completion_tokens === 40 && r.usage.prompt_tokens === refChat.prompt_ids.length, `chat usage ${JSON.stringify(r.usage)}`);
check(r.etch && r.etch.generated_tokens === 40, "the etch extension carries the stats");
let chat = "", first = null, last = null;
const stream = await client.chat.completions.create({ model: "stories", messages, max_tokens: 40, stream: true,
                                                       stream_options: { include_usage: true } });
for await (const ch of stream) {
  first ??= ch;
  last = ch;
  chat += ch.choices[0]?.delta?.content ?? "";
}
check(chat === refChat.text, "streamed chat equals etch run --chat");
check(first.choices[0].delta.role === "assistant", "the first chunk names the role");
check(last.usage && last.usage.completion_tokens === 40, "include_usage puts usage in the last chunk");
// The next turn with the history re-sent: the slot that holds it prefills only the new message.
const turn2 = await client.chat.completions.create({ model: "stories", max_tokens: 10,
  messages: [...messages, { role: "assistant", content: r.choices[0].message.content }, { role: "user", content: "And then?" }] });
check(turn2.usage.prompt_tokens_details.cached_tokens > refChat.prompt_ids.length,
      `the second turn reused the first (${turn2.usage.prompt_tokens_details.cached_tokens} cached)`);

// Stop strings, one and several.
const s1 = await client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 60, stop: "Lily" });
check(s1.choices[0].text === ", there was a little girl named " && s1.choices[0].finish_reason === "stop",
      `stop: ${JSON.stringify(s1.choices[0].text)}`);
const s2 = await client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 60, stop: ["zzz", "girl"] });
check(s2.choices[0].text === ", there was a little ", `stops: ${JSON.stringify(s2.choices[0].text)}`);

// Models, health, metrics.
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === "stories.etch", "models");
const health = await (await fetch(`http://127.0.0.1:${mainPort}/health`)).json();
check(health.status === "ok", "health");
const metrics = await (await fetch(`http://127.0.0.1:${mainPort}/metrics`)).text();
check(/etch_requests_total\{endpoint="completions",status="200"\} \d+/.test(metrics) &&
      /etch_time_to_first_token_ms_bucket\{le="\+Inf"\} \d+/.test(metrics), "metrics");
const page = await (await fetch(`http://127.0.0.1:${mainPort}/`)).text();
check(page.includes("<title>etch chat</title>"), "the chat page");

// The API key.
const nokey = new OpenAI({ baseURL: base(keyPort), apiKey: "wrong", maxRetries: 0 });
try { await nokey.models.list(); check(false, "a wrong key is refused"); }
catch (e) { check(e.status === 401 && /API key/.test(e.message), `401 without the key: ${e.status}`); }
const keyed = new OpenAI({ baseURL: base(keyPort), apiKey: "sekret", maxRetries: 0 });
check((await keyed.completions.create({ model: "s", prompt: "Once", max_tokens: 3 })).usage.completion_tokens === 3, "with the key");

// Bad requests: each a clear error, and the server stays up.
const raw = async (body, headers = {}) => {
  const res = await fetch(`http://127.0.0.1:${mainPort}/v1/completions`, { method: "POST", body,
    headers: { "Content-Type": "application/json", ...headers } });
  return { status: res.status, body: await res.json().catch(() => ({})) };
};
const bad = [
  ["malformed JSON", "{\"prompt\": ", 400, /not valid JSON/],
  ["negative max_tokens", JSON.stringify({ prompt: "x", max_tokens: -5 }), 400, /max_tokens/],
  ["unknown field", JSON.stringify({ prompt: "x", bogus: 1 }), 400, /unknown field 'bogus'/],
  ["n = 2", JSON.stringify({ prompt: "x", n: 2 }), 400, /n must be 1/],
  ["invalid UTF-8", Buffer.concat([Buffer.from("{\"prompt\": \"ab"), Buffer.from([0xff, 0xfe]), Buffer.from("\"}")]), 400, /UTF-8/],
  ["10 MB body", JSON.stringify({ prompt: "x".repeat(10 << 20) }), 413, /body/],
];
for (const [what, body, status, pattern] of bad) {
  const r2 = await raw(body);
  check(r2.status === status && r2.body.error && pattern.test(r2.body.error.message),
        `${what}: ${r2.status} ${JSON.stringify(r2.body).slice(0, 200)}`);
}
check((await fetch(`http://127.0.0.1:${mainPort}/v2/nothing`)).status === 404, "404 for an unknown path");
// A body that never finishes: the connection is closed after the server's timeout (2 s here).
const slowClient = await new Promise((resolve) => {
  const sock = net.connect(Number(mainPort), "127.0.0.1", () => {
    sock.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pro");
  });
  const t0 = Date.now();
  sock.on("close", () => resolve(Date.now() - t0));
  sock.on("error", () => {});
  setTimeout(() => { sock.destroy(); resolve(-1); }, 10000);
});
check(slowClient > 0 && slowClient < 9000, `a body that never ends is cut off (${slowClient} ms)`);
check((await (await fetch(`http://127.0.0.1:${mainPort}/health`)).json()).status === "ok", "still up after the bad requests");

// Clients that vanish mid-stream free their slot at the next token (the slow model, one slot).
const slow = new OpenAI({ baseURL: base(slowPort), apiKey: "none", maxRetries: 0 });
for (let i = 0; i < 3; i++) {
  const ac = new AbortController();
  const st = await slow.completions.create({ model: "slow", prompt: "Hello", max_tokens: 3000, stream: true }, { signal: ac.signal });
  let n = 0;
  try { for await (const _ of st) { if (++n === 5) ac.abort(); } } catch { /* aborted */ }
  const t0 = Date.now();
  let idle = false;
  while (Date.now() - t0 < 5000 && !idle) {
    idle = (await (await fetch(`http://127.0.0.1:${slowPort}/health`)).json()).slots_busy === 0;
    if (!idle) await new Promise((r3) => setTimeout(r3, 20));
  }
  check(idle, `disconnect ${i}: the slot is free again (${Date.now() - t0} ms)`);
}
// ...and so does a client that gives up on a whole (non-streamed) answer.
const ac2 = new AbortController();
const whole = slow.completions.create({ model: "slow", prompt: "Hello", max_tokens: 3000 }, { signal: ac2.signal }).catch(() => null);
await new Promise((r4) => setTimeout(r4, 300));
ac2.abort();
await whole;
const t1 = Date.now();
let idle2 = false;
while (Date.now() - t1 < 8000 && !idle2) {
  idle2 = (await (await fetch(`http://127.0.0.1:${slowPort}/health`)).json()).slots_busy === 0;
  if (!idle2) await new Promise((r5) => setTimeout(r5, 20));
}
check(idle2, `a vanished non-streaming client frees its slot (${Date.now() - t1} ms)`);
const after = await slow.completions.create({ model: "slow", prompt: "Hello", max_tokens: 4 });
check(after.usage.completion_tokens === 4, "the slow server answers after the disconnects");

// Past the slots and the queue (one slot, a queue of two): refused with 429, never lost.
const burst = await Promise.all(Array.from({ length: 8 }, () =>
  fetch(`http://127.0.0.1:${slowPort}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "Hello", max_tokens: 40 }) }).then(async (res) => ({ status: res.status, body: await res.json() }))));
const n200 = burst.filter((b) => b.status === 200).length, n429 = burst.filter((b) => b.status === 429).length;
check(n200 + n429 === 8 && n200 >= 1 && n429 >= 1 && burst.every((b) => b.status === 200 || /queue is full/.test(b.body.error.message)),
      `a burst of 8 on 1 slot and a queue of 2: ${n200} answered, ${n429} refused`);

console.log(`openai client: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
