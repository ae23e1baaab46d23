"""How repetitive the embedded model's text is, greedy against sampling with shared noise, on the app's examples.

    python -m tools.repetition [--tokens 120] [--seeds 0,1,2] [--temperatures 0.5,0.7,0.9]

For each example prompt (demo.prompts.EXAMPLES, encoded as the app encodes them) and each setting, the share
of distinct 4-grams among all 4-grams of the continuation (1.0: no 4-gram repeats; a loop such as "and the
LORD, and the LORD, ..." drives it towards 0), and how many drafts speculative decoding (k=2, select)
kept, with shared noise and with rejection sampling. Sampled rows are means over the seeds; every
speculative run is checked token-identical to plain decoding with the same seed (greedy, shared noise).
"""
import argparse
import statistics

import torch

from demo.prompts import EXAMPLES
from qwen.chat import Chat
from qwen.model import Model
from qwen.mtp import MTP, generate_mtp
from qwen.sample import generate
from qwen.weights import find_model


def distinct_4grams(tokens):
    grams = [tuple(tokens[i:i + 4]) for i in range(len(tokens) - 3)]
    return len(set(grams)) / len(grams) if grams else 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=120)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--temperatures", default="0.5,0.7,0.9")
    ap.add_argument("--k", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    path = find_model()
    model = Model.from_pretrained(path)
    head = MTP.from_pretrained(model.cfg, path, lm_head=model.lm_head)
    chat = Chat(model, path)
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}; {args.tokens} tokens, k={args.k}, "
          f"seeds {seeds}; distinct 4-grams (1.0 = none repeats) and drafts kept per draft")
    print("| example | greedy | " + " | ".join(f"T={t}" for t in args.temperatures.split(",")) + " |")
    print("|---|---|" + "---|" * len(args.temperatures.split(",")))
    totals = {}
    for kind, prompt, raw, _ in EXAMPLES:
        ids = chat.encode(prompt) if raw or not chat.has_template else \
            chat.encode_chat([{"role": "user", "content": prompt}], enable_thinking=False)
        cells = []
        for temperature in [0.0] + [float(t) for t in args.temperatures.split(",")]:
            distinct, shared, rejection = [], [], []
            for seed in (seeds if temperature else [0]):
                sampling = dict(temperature=temperature, seed=seed) if temperature else {}
                plain = generate(model, ids, args.tokens, chat.stop, **sampling)
                spec, rounds, hits = generate_mtp(model, head, ids, args.tokens, chat.stop, k=args.k, **sampling)
                assert spec == plain, (kind, temperature, seed)
                distinct.append(distinct_4grams(plain))
                shared.append(hits / max(1, rounds * args.k))
                if temperature:
                    _, r2, h2 = generate_mtp(model, head, ids, args.tokens, chat.stop, k=args.k, temperature=temperature,
                                             generator=torch.Generator().manual_seed(seed))
                    rejection.append(h2 / max(1, r2 * args.k))
            row = (statistics.mean(distinct), statistics.mean(shared), statistics.mean(rejection) if rejection else None)
            totals.setdefault(temperature, []).append(row)
            cells.append(f"{row[0]:.2f} (kept {row[1]:.2f}" + (f" / rejection {row[2]:.2f})" if row[2] is not None else ")"))
        print(f"| {kind} | " + " | ".join(cells) + " |")
    print("| mean | " + " | ".join(
        f"{statistics.mean(r[0] for r in rows):.2f} (kept {statistics.mean(r[1] for r in rows):.2f}"
        + (f" / rejection {statistics.mean(r[2] for r in rows):.2f})" if rows[0][2] is not None else ")")
        for _, rows in sorted(totals.items())) + " |")


if __name__ == "__main__":
    main()
