"""k="auto"'s rule replayed in simulation: how close it comes to the best fixed k, prompt by prompt, in seconds.

    python -m tools.auto_sim                        # the rule as shipped, costs 1, 1.62, 2.19, 2.57 steps
    python -m tools.auto_sim --costs 1,1.3,1.5,1.7 --sweep

First, for every position along plain greedy decoding of each prompt (the length bench's five, then the race's
other five examples, held out), how many drafts a round of 4 starting there would keep (the eager embedded model;
greedy drafts form a chain, so a round of m keeps min(that, m)). Then each rule is replayed over those verdicts:
a round of m costs costs[m] plain steps; after a rest the head's catch-up costs 0.45 steps for up to 4 missed
tokens (a compiled head pass) and 1.3 beyond (eager), as timed on the compiled views (2026-12-06). The figures
are tokens per plain step, ÷ the best fixed k's in hindsight; and a head that is never right. --sweep tries the rule's constants
(qwen.adaptive: START, MEMORY, PRIOR, FIRST_REST, LEAN) and prints the best by their mean over the ten prompts.
"""
import argparse
import itertools

import torch

from tools.length_bench import OWN
from demo.models import load_model
from demo.prompts import EXAMPLES, prepare
from demo.validate import race_settings
from qwen import adaptive
from qwen.mtp import generate_mtp_stream
from qwen.sample import generate
from qwen.weights import find_model

DEPTH = 4


def verdicts(loaded, prompt, raw, new):
    """Per position i of the greedy continuation: drafts a round of DEPTH starting with token i would keep."""
    ids, _ = prepare(loaded, race_settings(prompt, max_new_tokens=new, raw=raw))
    text = generate(loaded.model, ids, new + DEPTH + 2)
    out = []
    for i in range(new):
        prefix = torch.cat([ids, torch.tensor([text[:i]], dtype=ids.dtype)], dim=1) if i else ids
        stream = generate_mtp_stream(loaded.model, loaded.mtp, prefix, DEPTH + 2, k=DEPTH)
        next(stream)                                               # the prompt's pass emits text[i]
        _, _, hits = next(stream)
        stream.close()
        out.append(hits)
    return out


def fixed(ns, m, costs):
    """Tokens per plain step with every round drafting m."""
    p, spent = 0, 0.0
    while p < len(ns):
        spent += costs[m]
        p += min(ns[p], m) + 1
    return len(ns) / spent


def catch_up(missed):
    return 0.45 if missed <= 4 else 1.3


def auto(ns, costs):
    """Tokens per plain step under qwen.adaptive's rule (its constants as they are now)."""
    lengths, p, spent, missed = adaptive.DraftLengths(costs), 0, 0.0, 0
    while p < len(ns):
        m = lengths.choose()
        if m and missed:
            spent, missed = spent + catch_up(missed), 0
        missed += m == 0
        kept = min(ns[p], m)
        lengths.saw(m, kept)
        spent += costs[m]
        p += kept + 1
    return len(ns) / spent


def relative(table, costs):
    return [auto(ns, costs) / max(fixed(ns, m, costs) for m in range(1, len(costs))) for ns in table.values()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", default="1,1.62,2.19,2.57", help="a round of 0..K drafts, in plain steps")
    parser.add_argument("--sweep", action="store_true", help="try the rule's constants")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    costs = tuple(float(x) for x in args.costs.split(","))
    source = find_model()
    loaded = load_model(source, source, compile=False)
    prompts = [(p, raw, new) for _, p, raw, new in EXAMPLES[:3]] + [(p, raw, new) for _, p, raw, new in OWN] + \
              [(p, raw, new) for _, p, raw, new in EXAMPLES[3:]]
    table = {p[:20].replace("\n", " "): verdicts(loaded, p, raw, new) for p, raw, new in prompts}
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}; costs {costs}; the first five: the length "
          f"bench's prompts, the last five held out\n\n| prompt | k=1 | k=2 | k=3 | auto | auto ÷ best |\n|---|---|---|---|---|---|")
    for (label, ns), rel in zip(table.items(), relative(table, costs)):
        cells = " | ".join(f"{fixed(ns, m, costs):.2f}" for m in range(1, len(costs)))
        print(f"| {label}… | {cells} | {auto(ns, costs):.2f} | {rel:.3f} |")
    print(f"\na head never right, 120 tokens: auto {auto([0] * 120, costs):.2f} tokens per plain step (plain: 1.00)")
    if args.sweep:
        names = ("START", "MEMORY", "PRIOR", "FIRST_REST", "LEAN")
        tried = []
        for values in itertools.product([0.8, 0.9, 1.0], [0.85, 0.9], [2, 4, 6], [2, 4], [2, 4, 8]):
            for name, v in zip(names, values):
                setattr(adaptive, name, v)
            rel = relative(table, costs)
            tried.append((sum(rel) / len(rel), min(rel), values))
        for mean, worst, values in sorted(tried, reverse=True)[:8]:
            print(f"mean {mean:.3f}, worst {worst:.3f}: " + ", ".join(f"{n}={v}" for n, v in zip(names, values)))


if __name__ == "__main__":
    main()
