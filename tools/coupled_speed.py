"""Speculative sampling with shared noise against greedy speculative decoding, the embedded model, one process.

    python -m tools.coupled_speed [--compile] [--k 2] [--temperature 0.7] [--repeats 5]

On the app's example prompts, alternating in one process (these hosts are noisy): greedy speculative
decoding, coupled speculative sampling (seed = repeat), and plain decoding of each. Prints tok/s medians,
coupled ÷ greedy speculative, drafts kept per draft and the time per round, beside the CPU capability.
"""
import argparse
import statistics
import time

import torch

from demo.prompts import EXAMPLES
from qwen.chat import Chat
from qwen.model import Model
from qwen.mtp import MTP, generate_mtp
from qwen.sample import generate
from qwen.weights import find_model


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--tokens", type=int, default=120)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    path = find_model()
    model = Model.from_pretrained(path)
    head = MTP.from_pretrained(model.cfg, path, lm_head=model.lm_head)
    chat = Chat(model, path)
    if args.compile:
        from qwen.compiled import warm_up
        report = warm_up(model, head, ks=(args.k,), rollbacks=("select",), keep_if_faster=False)
        print(f"compiled: {report['status']} in {report['seconds']:.0f} s")
        model, head = report["model"], report["head"]
    rates = {"greedy plain": [], "greedy speculative": [], "sampled plain": [], "sampled speculative": []}
    kept, per_round = {"greedy": [], "sampled": []}, {"greedy": [], "sampled": []}
    prompts = [chat.encode(p) for _, p, raw, _ in EXAMPLES if raw]
    for rep in range(args.repeats):
        for ids in prompts:
            sampled = dict(temperature=args.temperature, seed=rep)
            for name, fn in (("greedy plain", lambda: generate(model, ids, args.tokens)),
                             ("greedy speculative", lambda: generate_mtp(model, head, ids, args.tokens, k=args.k)),
                             ("sampled plain", lambda: generate(model, ids, args.tokens, **sampled)),
                             ("sampled speculative", lambda: generate_mtp(model, head, ids, args.tokens, k=args.k,
                                                                         **sampled))):
                out, seconds = timed(fn)
                tokens = out if name.endswith("plain") else out[0]
                rates[name].append(len(tokens) / seconds)
                if name.endswith("speculative"):
                    kept[name.split()[0]].append(out[2] / max(1, out[1] * args.k))
                    per_round[name.split()[0]].append(seconds / max(1, out[1]))
    med = {name: statistics.median(v) for name, v in rates.items()}
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, 1 thread, k={args.k}, "
          f"T={args.temperature}, {'compiled' if args.compile else 'eager'}, {len(prompts)} prompts x {args.repeats}")
    for name, v in med.items():
        print(f"  {name}: {v:.1f} tok/s (median)")
    print(f"  sampled ÷ greedy speculative: {med['sampled speculative'] / med['greedy speculative']:.2f}; "
          f"speculative ÷ plain: greedy {med['greedy speculative'] / med['greedy plain']:.2f}, "
          f"sampled {med['sampled speculative'] / med['sampled plain']:.2f}")
    print(f"  drafts kept per draft: greedy {statistics.mean(kept['greedy']):.3f}, "
          f"sampled {statistics.mean(kept['sampled']):.3f}")
    print(f"  a round (prefill included): greedy {statistics.median(per_round['greedy']) * 1e3:.2f} ms, sampled "
          f"{statistics.median(per_round['sampled']) * 1e3:.2f} ms, sampled ÷ greedy "
          f"{statistics.median(per_round['sampled']) / statistics.median(per_round['greedy']):.2f}")


if __name__ == "__main__":
    main()
