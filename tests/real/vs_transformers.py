"""Three implementations teacher-forced on the same token sequences of one real GGUF file: etch (its
program of the file), llama.cpp (the greedy continuations run.sh recorded) and Hugging Face
transformers, which loads the GGUF through gguf-py (every weight dequantized to f32) and runs its own
PyTorch forward in f32. A sequence is a prompt's ids (as etch rendered them) followed by llama.cpp's
64 tokens; at each of those positions each side's next token is its argmax (llama.cpp's: the token it
chose). Prints, for each pair, how often the next tokens agree, and for etch and transformers how far
apart their logits are. A disagreement whose reference top two logits lie within 0.5 is a near-tie.

The point: etch and llama.cpp agree on 97-99% of positions; this says which of the two the
disagreements belong to, against an implementation that shares neither's code. Each PROGRAM is held
to its MIN_AGREE: a fraction, or "llama.cpp" for llama.cpp's own agreement with transformers less one
point (a program that rounds activations to int8, as llama.cpp does, is held to llama.cpp's level;
one with f32 activations computes the file's arithmetic and is held to 0.99). Exits 1 when one falls
short. tests/real/vs_transformers.sh installs torch and transformers into a venv and runs it (in CI,
not in `make test`: several GB).
usage: vs_transformers.py MODEL.gguf LLAMACPP.json PROGRAM.etch MIN_AGREE [PROGRAM.etch MIN_AGREE ...]"""
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

import etch

gguf_path, recorded = sys.argv[1], sys.argv[2]
programs, mins = sys.argv[3::2], sys.argv[4::2]
if not programs or len(programs) != len(mins):
    sys.exit("usage: vs_transformers.py MODEL.gguf LLAMACPP.json PROGRAM.etch MIN_AGREE [PROGRAM.etch MIN_AGREE ...]")
torch.set_num_threads(2)
hf_logging.disable_progress_bar()
hf_logging.set_verbosity_error()
hf = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(gguf_path)),
                                          gguf_file=os.path.basename(gguf_path), dtype=torch.float32,
                                          attn_implementation="eager")
hf.eval()
models = [etch.ETModelForCausalLM(p) for p in programs]
sessions = [m.session(kv_type="f32") for m in models]  # llama.cpp's cache is f32 in run.sh too
vocab = models[0].method_meta()["vocab_size"]
names = ["etch" if i == 0 else "etch " + os.path.basename(p) for i, p in enumerate(programs)]


def etch_logits(i, ids):
    """[len(ids), vocab]: every position's logits of program i, prefilled in chunks of max_seq_len."""
    rows, chunk = [], models[i].method_meta()["max_seq_len"]
    for at in range(0, len(ids), chunk):
        part = ids[at:at + chunk]
        rows.append(np.frombuffer(sessions[i].forward(part, start_pos=at, all_logits=True), dtype=np.float32)
                    .reshape(len(part), vocab))
    return np.concatenate(rows)


def near_tie(logits, a, b):
    return abs(float(logits[a]) - float(logits[b])) < 0.5


pairs = {"llama.cpp/transformers": [0, 0]}
for name in names:
    pairs[name + "/transformers"], pairs[name + "/llama.cpp"] = [0, 0], [0, 0]
total = 0
max_diff, rel_diff = [], []  # the first program's
lines = []
for n, r in enumerate(json.load(open(recorded))["results"]):
    prompt, gen = r["prompt"], r["generated"]
    ids = prompt + gen
    es = [etch_logits(i, ids) for i in range(len(programs))]
    with torch.no_grad():
        h = hf(torch.tensor([ids])).logits[0].float().numpy()
    h = h[:, :vocab]  # transformers may pad the vocabulary
    for t in range(len(gen)):
        pos = len(prompt) - 1 + t
        ht, lt = int(h[pos].argmax()), gen[t]
        total += 1
        cmp = [("llama.cpp/transformers", lt, ht, h[pos])]
        for name, e in zip(names, es):
            et = int(e[pos].argmax())
            cmp += [(name + "/transformers", et, ht, h[pos]), (name + "/llama.cpp", et, lt, e[pos])]
            if et != ht:
                lines.append("prompt %d, token %d: %s %d, transformers %d, llama.cpp %d (transformers' logits %.3f vs %.3f)"
                             % (n, t, name, et, ht, lt, h[pos][ht], h[pos][et]))
        for name, a, b, ref in cmp:
            if a == b:
                pairs[name][0] += 1
            elif near_tie(ref, a, b):
                pairs[name][1] += 1
        d = np.abs(es[0][pos] - h[pos])
        max_diff.append(float(d.max()))
        rel_diff.append(float(d.max() / (np.abs(h[pos]).max() + 1e-30)))

print("%s: %d positions teacher-forced (%d prompts)" % (os.path.basename(gguf_path), total, n + 1))
for line in lines:
    print("  etch and transformers differ at " + line)
print("  etch is %s%s" % (programs[0], "".join("; etch %s is %s" % (os.path.basename(p), p) for p in programs[1:])))
for name, (agree, ties) in pairs.items():
    print("  %-24s %6.2f%% agree, %5.2f%% more are near-ties, %5.2f%% other" %
          (name, 100.0 * agree / total, 100.0 * ties / total, 100.0 * (total - agree - ties) / total))
print("  etch's logits beside transformers': largest difference per position median %.4f, max %.4f "
      "(relative to the largest logit: median %.2e)" % (np.median(max_diff), max(max_diff), np.median(rel_diff)))
print(json.dumps({"model": os.path.basename(gguf_path), "positions": total,
                  "agree": {k: v[0] / total for k, v in pairs.items()},
                  "near_ties": {k: v[1] / total for k, v in pairs.items()},
                  "max_logit_diff_median": float(np.median(max_diff)), "max_logit_diff_max": max(max_diff),
                  "versions": {"torch": torch.__version__,
                               "transformers": __import__("transformers").__version__}}))
failed = False
for name, program, want in zip(names, programs, mins):
    agree = pairs[name + "/transformers"][0] / total
    floor = pairs["llama.cpp/transformers"][0] / total - 0.01 if want == "llama.cpp" else float(want)
    if agree < floor:
        print("FAIL: %s picks transformers' next token at %.2f%% of the positions, below %.2f%% (%s)"
              % (program, 100 * agree, 100 * floor, want))
        failed = True
sys.exit(1 if failed else 0)
