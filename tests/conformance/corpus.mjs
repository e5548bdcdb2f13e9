// Writes the tokenizer conformance corpus (a JSON array of strings) to stdout: hand-picked cases
// and seeded random mixtures of many scripts, emoji, digits and long numbers, whitespace runs and
// tabs, code, contractions, URLs and special tokens inside text. Deterministic.
const fixed = [
  "Hello world", "Hello, world!", " leading space", "trailing space ", "  two leading", "ends with two  ",
  "", " ", "  ", "\t", "\n", "\r\n", "\n\n\n", " \n \n ", "a\tb\t\tc", "tabs\t\t\tand   spaces   mixed \t \t",
  "don't won't can't I'll you're we've she's it'd they'd I'm", "DON'T WON'T I'LL YOU'RE IT'S", "'s 't 're 've 'm 'll 'd",
  "rock 'n' roll", "O'Reilly's", "1", "12", "123", "1234", "12345678901234567890", "3.14159265358979", "-42", "+7",
  "1,000,000.50", "2026-11-29T18:06:05Z", "0x7fffffff", "1e-10", "v1.2.3-rc.4", "phone: +1 (555) 010-9999",
  "https://example.com/path?query=1&x=%20y#frag", "mailto:someone@example.org", "http://[::1]:8080/", "ftp://a.b/c.d",
  "def f(x):\n    return x ** 2  # square\n", "int main(void) {\n\treturn 0;\n}\n", "for (i = 0; i < n; i++) { a[i] += b[i]; }",
  "{\"key\": [1, 2, {\"nested\": null}], \"s\": \"q\\\"uote\"}", "<div class=\"x\">&amp; &lt;tag&gt;</div>",
  "SELECT * FROM t WHERE a = 'x' AND b <> 3;", "x => x.map(y => y * 2).filter(Boolean)", "$ ls -la | grep '^d' > out.txt",
  "Ünïcödé ñ ç ø å æ ß œ", "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
  "สวัสดีชาวโลก", "你好，世界！", "日本語のテキストです。カタカナ、ひらがな、漢字。", "안녕하세요 세계", "გამარჯობა", "Բարեւ աշխարհ",
  "Tiếng Việt có dấu", "Türkçe İstanbul ıi", "Ελληνικά ΐ ΰ", "ﬁ ﬂ ligatures", "ｆｕｌｌｗｉｄｔｈ １２３",
  "😀", "😀😃😄", "👍🏽 👍🏿", "👨‍👩‍👧‍👦 family", "🇺🇸🇫🇷🇯🇵 flags", "❤️ ✨ ☀️", "emoji😀inside😃words", "🤖 robots 🦾",
  "e\u0301 (e + combining acute)", "A\u030a", "\u1100\u1161\u11a8 jamo", "zero\u200bwidth\u200bspace", "nbsp\u00a0here",
  "soft\u00adhyphen", "bidi \u202e reversed \u202c", "\u00e9 precomposed vs e\u0301", "Å vs A\u030a vs \u212b",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>", "text<|endoftext|>more", "<think>\nreasoning\n</think>\n\nanswer",
  "<|im_start|><|im_end|>", "<|im_start", "im_start|>", "< |im_start| >", "<s>", "</s>", "<unk>", "a<s>b</s>c", "<s> spaced </s>",
  "<0x41> literal byte token text", "[INST] hello [/INST]", "<<SYS>>\nsys\n<</SYS>>", "<|start_header_id|>user<|end_header_id|>",
  "....!!!???", "---___===+++", "(((nested)))", "\"quoted\" 'single' `back`", "a  b   c    d     e", "word.word,word;word:word",
  "CamelCaseIdentifier snake_case_name kebab-case-name SCREAMING_CASE", "ALLCAPS lowercase MiXeD", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "ab".repeat(40), "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore.",
  "The quick brown fox jumps over the lazy dog. " + "The quick brown fox jumps over the lazy dog.",
  "\u0000nul", "bell\u0007", "esc\u001b[31mred\u001b[0m", "\u007f del", "line\u2028sep", "para\u2029sep", "\u3000ideographic space",
];

let state = 0x2545F4914F6CDD1Dn;
function rnd(n) { // xorshift64*
  state ^= state >> 12n; state ^= (state << 25n) & 0xFFFFFFFFFFFFFFFFn; state ^= state >> 27n;
  return Number(((state * 0x2545F4914F6CDD1Dn) & 0xFFFFFFFFFFFFFFFFn) >> 33n) % n;
}
const pick = a => a[rnd(a.length)];
const words = [
  "the", "of", "and", "token", "prefill", "batched", "model", "Once", "upon", "time", "running", "quickly", "internationalization",
  "мир", "данные", "κόσμος", "λόγος", "世界", "模型", "東京", "ありがとう", "한국어", "مرحبا", "שלום", "हिन्दी", "ไทย", "Ünïcödé",
  "naïve", "café", "façade", "Straße", "😀", "🚀", "👩‍💻", "🇯🇵", "✓", "∑", "∞", "≠", "π", "€", "£", "¥",
  "42", "007", "3.14", "1000000", "2026", "99.9%", "#1", "@user", "x_1", "a.b.c", "foo()", "[0]", "{}", "<b>", "&&", "||", "->", "::",
  "don't", "I'm", "you'll", "it's", "we've", "'d", "https://x.io/a?b=c", "user@mail.com", "C:\\path\\file.txt", "/usr/bin/env",
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<s>", "</s>", "<unk>",
];
const seps = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "", ", ", ". ", "! ", "? ", ";", " - ", "   ", "\n\n", " \t "];
const corpus = [...fixed];
while (corpus.length < 2100) {
  const n = 1 + rnd(14);
  let s = rnd(8) === 0 ? pick(seps) : "";
  for (let i = 0; i < n; i++) s += pick(words) + (i + 1 < n || rnd(4) === 0 ? pick(seps) : "");
  if (rnd(10) === 0) s = s.toUpperCase();
  if (rnd(12) === 0) s = String(rnd(1e9)) + String(rnd(1e9)) + s;
  corpus.push(s);
}
// A thousand more without special tokens, so that properties that exclude them (SentencePiece
// round trips) still cover over two thousand strings.
const plain = words.filter(w => !w.startsWith("<"));
while (corpus.length < 3100) {
  const n = 1 + rnd(14);
  let s = "";
  for (let i = 0; i < n; i++) s += pick(plain) + (i + 1 < n || rnd(4) === 0 ? pick(seps) : "");
  if (rnd(10) === 0) s = s.toUpperCase();
  corpus.push(s);
}
process.stdout.write(JSON.stringify(corpus));
