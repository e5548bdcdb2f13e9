#!/usr/bin/python3
"""Medians and ratios of bench/vs_llamacpp.sh's runs, as a Markdown table, and an SVG plot of
prompt tokens/s against prompt length for both implementations (standard library only).
usage: report.py runs.jsonl plot.svg [TITLE]"""
import json
import statistics
import sys
from collections import defaultdict

runs = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
by = defaultdict(lambda: defaultdict(list))
for r in runs:
    for k in ("prefill_tok_s", "decode_tok_s"):
        by[(r["impl"], r["n_prompt"])][k].append(r[k])
lengths = sorted({r["n_prompt"] for r in runs})
threads = runs[0]["threads"]
release = next((r["release"] for r in runs if r.get("release")), "?")
med = {key: {k: statistics.median(v) for k, v in d.items()} for key, d in by.items()}
rounds = len(by[("etch", lengths[0])]["prefill_tok_s"])
print(f"threads {threads}, llama.cpp {release} (node-llama-cpp 3.21.1); each figure: the median over {rounds} alternating "
      f"rounds of each round's median of {runs[0].get('reps', '?')} runs\n")
print("| prompt tokens | etch prefill tok/s | llama.cpp prefill tok/s | ratio | etch decode tok/s | llama.cpp decode tok/s | ratio |")
print("|---|---|---|---|---|---|---|")
for n in lengths:
    e, l = med.get(("etch", n)), med.get(("llama.cpp", n))
    if not e or not l:
        continue
    print(f"| {n} | {e['prefill_tok_s']:.1f} | {l['prefill_tok_s']:.1f} | {e['prefill_tok_s'] / l['prefill_tok_s']:.2f}x "
          f"| {e['decode_tok_s']:.2f} | {l['decode_tok_s']:.2f} | {e['decode_tok_s'] / l['decode_tok_s']:.2f}x |")

# The plot: prompt tokens/s (y) against prompt length (x, log scale), one line per implementation.
W, H, L, B, R, T = 640, 400, 70, 50, 20, 40
title = sys.argv[3] if len(sys.argv) > 3 else "Qwen3-0.6B F16"
ymax = max(v["prefill_tok_s"] for v in med.values()) * 1.1
import math
lx = [math.log2(n) for n in lengths]
def px(n): return L + (math.log2(n) - lx[0]) / max(lx[-1] - lx[0], 1e-9) * (W - L - R)
def py(v): return H - B - v / ymax * (H - B - T)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title} prefill, {threads} threads: prompt tokens/s</text>',
       f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>', f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
for n in lengths:
    svg.append(f'<text x="{px(n)}" y="{H - B + 18}" text-anchor="middle">{n}</text>')
for i in range(6):
    v = ymax * i / 5
    svg.append(f'<text x="{L - 8}" y="{py(v) + 4}" text-anchor="end">{v:.0f}</text>')
    svg.append(f'<line x1="{L}" y1="{py(v)}" x2="{W - R}" y2="{py(v)}" stroke="#ddd"/>')
svg.append(f'<text x="{W / 2}" y="{H - 10}" text-anchor="middle">prompt length (tokens)</text>')
for impl, color, yl in (("etch", "#c0392b", T + 10), ("llama.cpp", "#2471a3", T + 28)):
    pts = [(px(n), py(med[(impl, n)]["prefill_tok_s"])) for n in lengths if (impl, n) in med]
    svg.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (color, " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)))
    svg += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>' for x, y in pts]
    svg.append(f'<rect x="{W - 150}" y="{yl - 9}" width="12" height="3" fill="{color}"/><text x="{W - 132}" y="{yl - 4}">{impl}</text>')
svg.append("</svg>")
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(svg))
