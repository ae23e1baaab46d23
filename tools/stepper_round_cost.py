"""The stepper's recorded round against the race's "a round costs" term, on one prompt, as the app runs them.

    python -m tools.stepper_round_cost [--k 2] [--rollback select] [--prompts 3] [--no-compile]

Loads the embedded model compiled for k (the app's way, one thread), then per example prompt records a stepper run
(demo.stepper.recording.record_run: the trace, then each round again as the race runs it, and the race's cost terms
for these settings) and prints the recording's mean round as the race runs it (its rounds' engine seconds), the
instrumented recording's own mean round, and the race's terms for a round's passes and for a whole round (passes,
the work around them and per token), with the ratios.
"""
import argparse
import statistics

import torch

from qwen.costs import Costs
from demo.models import load_model, start_compiling
from demo.prompts import EXAMPLES, prepare
from demo.stepper.figures import run_yield
from demo.stepper.recording import record_run
from demo.stepper.steps import Settings
from demo.validate import race_settings
from qwen.weights import find_model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--rollback", default="select")
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    source = find_model()
    loaded = load_model(source, source, compile=False)
    if args.compile:
        start_compiling(loaded, (args.k,)).join()
    model, head = loaded.engine()
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, one thread, {loaded.compile_status()}; "
          f"k={args.k} {args.rollback}, greedy\n")
    print("| prompt | recorded round, as raced | recorded, instrumented | race: a round's passes | race: a round "
          "| as raced ÷ race's passes | as raced ÷ race's round |\n|---|---|---|---|---|---|---|")
    for _, prompt, raw, new in EXAMPLES[:args.prompts]:
        settings = Settings(prompt, k=args.k, rollback=args.rollback, max_new_tokens=new, raw=raw)
        ids, _ = prepare(loaded, race_settings(prompt, max_new_tokens=new, k=args.k, raw=raw))
        run = record_run(model, head, loaded.chat, ids, settings, loaded.key)
        rounds = run.records[1:]
        raced = statistics.fmean(sum(r["race_seconds"].values()) for r in rounds)
        own = statistics.fmean(sum(r["seconds"].values()) for r in rounds)
        terms = Costs(**run.costs)
        per_round, back = run_yield(run.records)
        passes, whole = terms.passes(back), terms.round_seconds(back, per_round)
        label = prompt[:20].replace("\n", " ").replace("|", "/")
        print(f"| {label}… | {raced * 1e3:.3f} ms | {own * 1e3:.3f} ms | {passes * 1e3:.3f} ms | {whole * 1e3:.3f} ms "
              f"| {raced / passes:.2f} | {raced / whole:.2f} |", flush=True)


if __name__ == "__main__":
    main()
