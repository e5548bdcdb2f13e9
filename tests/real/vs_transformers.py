"""Three implementations teacher-forced on the same token sequences of one real GGUF file: etch (its
program of the file), llama.cpp (the greedy continuations run.sh recorded) and Hugging Face
transformers, which loads the GGUF through gguf-py (every weight dequantized to f32) and runs its own
PyTorch forward in f32. A sequence is a prompt's ids (as etch rendered them) followed by llama.cpp's
64 tokens; at each of those positions each side's next token is its argmax (llama.cpp's: the token it
chose). Prints, for each pair, how often the next tokens agree, and for etch and transformers how far
apart their logits are. A disagreement whose reference top two logits lie within 0.5 is a near-tie.

The point: etch and llama.cpp agree on 97-99% of positions; this says which of the two the
disagreements belong to, against an implementation that shares neither's code. Exits 1 when etch
and transformers agree on fewer than MIN_AGREE of the positions. tests/real/vs_transformers.sh
installs torch and transformers into a venv and runs it (in CI, not in `make test`: several GB).
usage: vs_transformers.py MODEL.gguf PROGRAM.etch LLAMACPP.json MIN_AGREE"""
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

import etch

gguf_path, program, recorded, min_agree = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
torch.set_num_threads(2)
hf_logging.disable_progress_bar()
hf_logging.set_verbosity_error()
hf = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(gguf_path)),
                                          gguf_file=os.path.basename(gguf_path), dtype=torch.float32,
                                          attn_implementation="eager")
hf.eval()
model = etch.ETModelForCausalLM(program)
session = model.session(kv_type="f32")  # llama.cpp's cache is f32 in run.sh too
chunk = model.method_meta()["max_seq_len"]
vocab = model.method_meta()["vocab_size"]


def etch_logits(ids):
    """[len(ids), vocab]: every position's logits, the sequence prefilled in chunks of max_seq_len."""
    rows = []
    for at in range(0, len(ids), chunk):
        part = ids[at:at + chunk]
        rows.append(np.frombuffer(session.forward(part, start_pos=at, all_logits=True), dtype=np.float32)
                    .reshape(len(part), vocab))
    return np.concatenate(rows)


def near_tie(logits, a, b):
    return abs(float(logits[a]) - float(logits[b])) < 0.5


pairs = {"etch/transformers": [0, 0], "llama.cpp/transformers": [0, 0], "etch/llama.cpp": [0, 0]}
total = 0
max_diff, rel_diff = [], []
lines = []
for n, r in enumerate(json.load(open(recorded))["results"]):
    prompt, gen = r["prompt"], r["generated"]
    ids = prompt + gen
    e = etch_logits(ids)
    with torch.no_grad():
        h = hf(torch.tensor([ids])).logits[0].float().numpy()
    h = h[:, :vocab]  # transformers may pad the vocabulary
    for t in range(len(gen)):
        pos = len(prompt) - 1 + t
        et, ht, lt = int(e[pos].argmax()), int(h[pos].argmax()), gen[t]
        total += 1
        for name, a, b, ref in (("etch/transformers", et, ht, h[pos]), ("llama.cpp/transformers", lt, ht, h[pos]),
                                ("etch/llama.cpp", et, lt, e[pos])):
            if a == b:
                pairs[name][0] += 1
            elif near_tie(ref, a, b):
                pairs[name][1] += 1
        if et != ht:
            lines.append("prompt %d, token %d: etch %d, transformers %d, llama.cpp %d (transformers' logits %.3f vs %.3f)"
                         % (n, t, et, ht, lt, h[pos][ht], h[pos][et]))
        d = np.abs(e[pos] - h[pos])
        max_diff.append(float(d.max()))
        rel_diff.append(float(d.max() / (np.abs(h[pos]).max() + 1e-30)))

print("%s: %d positions teacher-forced (%d prompts)" % (os.path.basename(gguf_path), total, n + 1))
for line in lines:
    print("  etch and transformers differ at " + line)
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
agree = pairs["etch/transformers"][0] / total
if agree < min_agree:
    print("FAIL: etch picks transformers' next token at %.2f%% of the positions, below %.2f%%" % (100 * agree, 100 * min_agree))
    sys.exit(1)
