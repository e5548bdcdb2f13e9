// 16 clients at once on a server of 2 slots for SECONDS: every request is answered (200) or refused
// with 429/503 (never lost, never an error of another kind), and every answer is the one its own
// prompt gives alone (greedy), so no client ever gets another's text.
// usage: node load.mjs PORT WORK_DIR SECONDS
const [port, work, seconds] = process.argv.slice(2);
const url = `http://127.0.0.1:${port}/v1/completions`;
const prompts = ["Once upon a time", "The cat", "Lily went to the park", "One day, a big dog", "Tom had a red ball",
                 "The sun was hot", "A little bird", "Mom said"];
const ask = async (prompt, stream) => {
  const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: 24, stream }) });
  if (res.status !== 200) return { status: res.status, body: await res.text() };
  if (!stream) return { status: 200, text: (await res.json()).choices[0].text };
  const raw = await res.text();
  let text = "";
  for (const ev of raw.split("\n\n"))
    if (ev.startsWith("data: {")) text += JSON.parse(ev.slice(6)).choices[0].text;
  return { status: 200, text, done: raw.includes("data: [DONE]") };
};
// The answers alone, first.
const want = {};
for (const p of prompts) want[p] = (await ask(p, false)).text;
const counts = { 200: 0, 429: 0, 503: 0, other: 0, mixed: 0 };
const until = Date.now() + Number(seconds) * 1000;
const client = async (i) => {
  for (let k = 0; Date.now() < until; k++) {
    const p = prompts[(i + k) % prompts.length];
    let r;
    try { r = await ask(p, (i + k) % 2 === 0); } catch (e) { counts.other++; console.error("lost:", e.message, e.cause?.code ?? e.cause?.message ?? ""); continue; }
    if (r.status === 200) {
      counts[200]++;
      if (r.text !== want[p] || r.done === false) { counts.mixed++; console.error("mixed:", p, JSON.stringify(r.text)); }
    } else if (r.status === 429 || r.status === 503) {
      counts[r.status]++;
      await new Promise((res) => setTimeout(res, 20));
    } else { counts.other++; console.error("status", r.status, r.body); }
  }
};
await Promise.all(Array.from({ length: 16 }, (_, i) => client(i)));
console.log(`load: 16 clients, 2 slots, ${seconds} s: ${counts[200]} answered, ${counts[429]} refused (429), ` +
            `${counts[503]} timed out (503), ${counts.other} lost or other, ${counts.mixed} mixed`);
const ok = counts[200] > 0 && counts.other === 0 && counts.mixed === 0;
console.log(ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
process.exit(ok ? 0 : 1);
