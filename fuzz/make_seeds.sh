#!/usr/bin/env bash
# Writes the seed corpora under fuzz/seeds/ (committed; rerun only to change them). Small on purpose:
# a byte-level BPE tokenizer.json of 262 tokens, one-layer models in every input format made from it
# by `etch synth` and `etch export`, a llama2.c checkpoint and tokenizer.bin, and texts.
# usage: bash fuzz/make_seeds.sh BUILD_DIR
set -euo pipefail
ETCH=$1/etch
here=$(cd "$(dirname "$0")" && pwd)
S=$here/seeds
rm -rf "$S" && mkdir -p "$S"/{program,gguf,safetensors,config,tokenizer_json,llama2c,tokenize,chat,forward}
w=$(mktemp -d)
/usr/bin/python3 - "$w" "$S" <<'PY'
import json, os, struct, sys
w, S = sys.argv[1], sys.argv[2]
# GPT-2's byte-to-character alphabet.
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
alpha = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {alpha[b]: i for i, b in enumerate(range(256))}
merges = []
for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("o", "n"), ("Ġ", "a"), ("e", "r")]:
    merges.append(f"{a} {b}"); vocab[a + b] = len(vocab)
added = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
tok = {"version": "1.0", "truncation": None, "padding": None,
       "added_tokens": [{"id": len(vocab) + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                         "normalized": False, "special": True} for i, t in enumerate(added)],
       "normalizer": {"type": "NFC"},
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       "post_processor": None, "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False, "ignore_merges": False,
                 "vocab": vocab, "merges": merges}}
os.makedirs(f"{w}/tok", exist_ok=True)
json.dump(tok, open(f"{w}/tok/tokenizer.json", "w"), ensure_ascii=False)
json.dump({"bos_token": None, "eos_token": "<|im_end|>",
           "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"},
          open(f"{w}/tok/tokenizer_config.json", "w"))
json.dump(tok, open(f"{S}/tokenizer_json/tokenizer.json", "w"), ensure_ascii=False)
# llama2.c: version-0 header (dim, hidden, layers, heads, kv heads, vocab, seq len), then weights.
dim, hid, L, H, KV, V, T = 8, 16, 1, 2, 2, 16, 8
hd = dim // H
count = V*dim + L*dim + L*dim*dim*2 + L*dim*KV*hd*2 + L*dim + L*hid*dim*3 + dim + T*hd
ck = struct.pack("<7i", dim, hid, L, H, KV, V, T) + struct.pack(f"<{count}f", *[((i * 37) % 17 - 8) / 64 for i in range(count)])
open(f"{S}/llama2c/checkpoint", "wb").write(b"\x01" + ck)
tb = struct.pack("<i", 4)
for i in range(V):
    piece = [b"<unk>", b"<s>", b"</s>"][i] if i < 3 else bytes([ord("a") + i - 3]) * (1 + i % 3)
    tb += struct.pack("<fi", -float(i), len(piece)) + piece
open(f"{S}/llama2c/tokenizer", "wb").write(b"\x00" + tb)
for name, text in {"ascii": "Once upon a time, there was a little girl.", "utf8": "café 你好 😀 Привет\t\n",
                   "special": "<|im_start|>user\nhi<|im_end|>", "bytes": "\xff\xfe bad \xc3("}.items():
    open(f"{S}/tokenize/{name}", "wb").write(text.encode("utf-8", "surrogateescape") if name != "bytes" else b"\xff\xfe bad \xc3(")
open(f"{S}/chat/plain", "wb").write(b"\x18Hello there\x00You are terse.")
open(f"{S}/chat/think", "wb").write(b"\x1aExplain RoPE\x00")
for name, (count_, start, ids) in {"one": (1, 0, [5]), "chunk": (7, 3, [1, 2, 3, 4, 5, 6, 7]), "edge": (64, 448, list(range(64)))}.items():
    open(f"{S}/forward/{name}", "wb").write(struct.pack("<ii", count_, start) + struct.pack(f"<{len(ids)}i", *ids))
PY
shapes="--layers 1 --dim 16 --hidden-dim 32 --heads 2 --kv-heads 1 --head-dim 8 --context-len 64 --std 0.1"
"$ETCH" synth --arch qwen3 --tokenizer "$w/tok/tokenizer.json" --format hf $shapes -o "$w/qwen3-hf" 2>/dev/null
"$ETCH" synth --arch gemma3 --tokenizer "$w/tok/tokenizer.json" --format hf $shapes --sliding-window 4 -o "$w/gemma3-hf" 2>/dev/null
"$ETCH" synth --arch llama --tokenizer "$w/tok/tokenizer.json" --format gguf $shapes -o "$S/gguf/llama.gguf" 2>/dev/null
"$ETCH" synth --arch gemma3 --tokenizer "$w/tok/tokenizer.json" --format gguf $shapes --sliding-window 4 -o "$S/gguf/gemma3.gguf" 2>/dev/null
cp "$w/qwen3-hf/config.json" "$S/config/qwen3.json"
cp "$w/gemma3-hf/config.json" "$S/config/gemma3.json"
cp "$w/qwen3-hf/model.safetensors" "$S/safetensors/qwen3.safetensors"
"$ETCH" export --hf "$w/qwen3-hf" -o "$S/program/qwen3.etch" --max-context-len 32 >/dev/null 2>&1
"$ETCH" export --hf "$w/gemma3-hf" -o "$S/program/gemma3.etch" --max-context-len 32 --max-seq-len 4 >/dev/null 2>&1
# Quantized programs: int4 layers with a q8 table (8da4w), and static int8 activations (a8w8).
"$ETCH" quantize "$S/program/qwen3.etch" -o "$S/program/qwen3-8da4w.etch" --scheme 8da4w --group-size 8 --qembedding 8w >/dev/null 2>&1
printf 'the then in on <|im_start|>' >"$w/calib.txt"
"$ETCH" quantize "$S/program/qwen3.etch" -o "$S/program/qwen3-a8w8.etch" --scheme a8w8 --calib "$w/calib.txt" >/dev/null 2>&1
rm -rf "$w"
du -sh "$S"/*
