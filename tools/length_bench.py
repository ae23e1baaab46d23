"""Which draft length pays, prompt by prompt: plain decoding against fixed k = 1..K and k="auto".

    python -m tools.length_bench                              # embedded model, eager, greedy, 5 prompts, 5 repeats
    python -m tools.length_bench --compile                    # compiled for k = 1..K, as the app runs it
    python -m tools.length_bench --temperature 0.5 --repeats 7 --max-k 3
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python -m tools.length_bench

The prompts: the race's first three examples (demo.prompts.EXAMPLES) and two of our own (OWN). For each,
--repeats turns in which every lane generates the prompt's new tokens once (stop tokens ignored, so every lane
writes as many), the lanes' order rotating each turn; a lane's speed-up is plain seconds ÷ its seconds in the
same turn, and the table gives each lane's median with its range, whether every run wrote plain decoding's
tokens, and how many rounds "auto" kept each length; then the speed-ups the round costs alone predict (a lane's
tokens at a plain step each ÷ its rounds at seconds[m] each): where auto's prediction is near the best fixed k's
but its measurement is not, the loss is in how auto runs its rounds, not in which lengths it chose. Sampling (--temperature > 0) shares noise with seed 0,
as the page does. "auto" uses this host's round costs, measured once before the turns (qwen.mtp.lengths_for).
"""
import argparse
import statistics
import time

import torch

from demo.models import load_model, start_compiling
from demo.prompts import EXAMPLES, prepare
from demo.validate import race_settings
from qwen.mtp import generate_mtp, lengths_for
from qwen.sample import generate
from qwen.weights import find_model

OWN = [("own: a recipe", "Preheat the oven to 180 degrees. In a large bowl, mix", True, 120),
       ("own: chat, code", "Write a Python function that reverses a string.", False, 120)]


def lanes(max_k):
    """Lane names in order: plain, k=1..max_k, auto."""
    return ["plain"] + [f"k={k}" for k in range(1, max_k + 1)] + ["auto"]


def run_lane(name, model, head, ids, new, sampling, lengths):
    """Generate with one lane. -> (tokens, seconds, the seconds its rounds cost by `lengths`)"""
    t = time.perf_counter()
    if name == "plain":
        tokens = generate(model, ids, max_new_tokens=new, **sampling)
        cost = len(tokens) * lengths.seconds[0]
    elif name == "auto":
        tokens, _, _ = generate_mtp(model, head, ids, new, k="auto", lengths=lengths, **sampling)
        cost = sum(n * lengths.seconds[m] for m, n in lengths.counts.items())
    else:
        tokens, rounds, _ = generate_mtp(model, head, ids, new, k=int(name[2:]), **sampling)
        cost = rounds * lengths.seconds[int(name[2:])]
    return tokens, time.perf_counter() - t, cost


def turns(model, head, ids, new, sampling, max_k, repeats):
    """-> ({lane: [speed-up per turn]}, identical to plain in every run?, auto's rounds per kept length,
    {lane: the speed-up its rounds' costs predict})"""
    names, speedups, identical, counts, predicted = lanes(max_k), {}, True, {}, {}
    base = lengths_for(model, head, max_k, bool(sampling.get("temperature")))
    for turn in range(repeats + 1):                           # turn 0 warms every lane up, off the record
        order = names[turn % len(names):] + names[:turn % len(names)]
        seconds, outputs, costs = {}, {}, {}
        for name in order:
            lengths = base.fresh()
            outputs[name], seconds[name], costs[name] = run_lane(name, model, head, ids, new, sampling, lengths)
            if name == "auto" and turn:
                for m, c in lengths.counts.items():
                    counts[m] = counts.get(m, 0) + c
        identical &= all(out == outputs["plain"] for out in outputs.values())
        if turn:
            for name in names[1:]:
                speedups.setdefault(name, []).append(seconds["plain"] / seconds[name])
                predicted[name] = costs["plain"] / costs[name]
    return speedups, identical, counts, predicted


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a local folder or hub id (default: the embedded model)")
    parser.add_argument("--repeats", type=int, default=5, help="turns per prompt (plus one to warm up)")
    parser.add_argument("--max-k", type=int, default=3, help="the longest fixed k, and auto's longest draft")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy; else shared noise, seed 0")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--prompts", type=int, default=5, help="how many of the five prompts")
    parser.add_argument("--compile", action="store_true", help="compiled views for k = 1..max-k (the app's way)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    source = args.model or find_model()
    loaded = load_model(source, source, compile=False)
    if loaded.mtp is None:
        parser.error(f"{source} has no MTP draft head (no mtp.* tensors)")
    if args.compile:                                   # every length's round compiled, as k="auto" needs
        start_compiling(loaded, tuple(range(1, args.max_k + 1))).join()
    model, head = loaded.engine()
    sampling = dict(temperature=args.temperature, seed=0) if args.temperature else {}
    costs = lengths_for(model, head, args.max_k, bool(args.temperature))
    how = f"compiled ({loaded.compile_status()})" if args.compile else "eager"
    print(f"host: CPU capability {torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s); model "
          f"{loaded.key}, {how}; T={args.temperature:g}; a round of 0..{args.max_k} drafts, in plain steps: "
          + ", ".join(f"{s / costs.seconds[0]:.2f}" for s in costs.seconds))
    names = lanes(args.max_k)[1:]
    print("| prompt | " + " | ".join(names) + " | auto kept 0/1/2/… drafts | identical |")
    print("|---|" + "---|" * (len(names) + 2))
    predictions = []
    for kind, prompt, raw, new in (EXAMPLES[:3] + OWN)[:args.prompts]:
        ids, _ = prepare(loaded, race_settings(prompt, max_new_tokens=new, raw=raw))
        speedups, identical, counts, predicted = turns(model, head, ids, new, sampling, args.max_k, args.repeats)
        label = prompt[:20].replace("\n", " ").replace("|", "/")
        predictions.append(f"| {label}… | " + " | ".join(f"{predicted[name]:.2f}×" for name in names) + " |")
        cells = [f"{statistics.median(xs):.2f}× ({min(xs):.2f}-{max(xs):.2f})" for xs in speedups.values()]
        kept = "/".join(str(counts.get(m, 0)) for m in range(args.max_k + 1))
        print(f"| {label}… | " + " | ".join(cells) + f" | {kept} | {identical} |", flush=True)
    print("\npredicted by the round costs alone:\n\n| prompt | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    print("\n".join(predictions))


if __name__ == "__main__":
    main()
