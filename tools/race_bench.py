"""How much the race's speed-up varies from race to race, with the lanes taking turns and run one
after the other.

    python -m tools.race_bench                          # embedded model, compiled, 3 prompts, 8 races each way
    python -m tools.race_bench --turns-ms 0,5,50        # turns of several lengths against one after the other
    python -m tools.race_bench --prompts 2 --repeats 4 --no-compile --model PATH
    python -m tools.race_bench --reported               # the speed-up the page reports: each a median of repeats
    python -m tools.race_bench --tree 2+1               # the race's tree lane against its chain lane (all eager)
    python -m tools.race_bench --predict                # the cost model's prediction against the measured median
    python -m tools.race_bench --predict --rollback both --temperature 0 --tree 2+1
    python -m tools.race_bench --predict --k auto       # k="auto" lanes (compiled for k = 1..3)

For each of the race's example prompts (demo.prompts.EXAMPLES, the first --prompts), greedy, with k
and rollback `select` as the page's defaults: --repeats races with each schedule, alternating
(demo.race.take_turns with turns of each length asked, the app's; demo.race.one_after_another, its
former one), without the cost measurement. Printed per prompt and schedule: every race's speed-up
(speculative tok/s ÷ plain tok/s), their median, lowest and highest, each lane's median seconds
(lanes taking turns as fast as lanes run alone pay nothing for sharing the CPU), and whether every
race gave identical tokens; with the CPU capability torch uses and the thread count. With --reported, each
race is the page's whole race (demo.race.race with its unseen repeats) and its speed-up the median the page
reports, so the spread shows how well that holds still. A machine
shared with other work makes single races vary; the schedule that keeps the spread narrow is the
one a presenter can trust. With --tree, each race also runs the tree lane (the app's, every lane eager) and
the table gives, per prompt, the chain's and the tree's median speed-up over plain, how many races the tree
won, and each lane's tokens per main-model pass. With --predict, every example prompt (or the first --prompts)
runs --repeats whole page races (demo.race.race, its unseen repeats included) with the page's settings (sampled
at 0.5 with shared noise unless --temperature), each with its cost terms measured afresh (qwen.costs.TABLE.forget),
and the table gives per lane the measured median speed-up (the median of the races' medians, with their range),
the speed-up the cost terms predict (median and range over the independent measurements), and the error.
"""
import argparse
import functools
import statistics

import torch

from demo.models import load_model, start_compiling
from demo.prompts import prepare
from demo.race import TURN_SECONDS, one_after_another, race, speedup, take_turns
from demo.prompts import EXAMPLES
from qwen import costs
from demo.choices import AUTO_MAX_K, RACE_ROLLBACKS, TREES
from demo.validate import race_settings
from qwen.weights import find_model


def schedules(turns_ms):
    """{name: schedule}: taking turns of each length in turns_ms, and one after the other."""
    out = {f"turns of {ms:g} ms": functools.partial(take_turns, quantum=ms / 1000) for ms in turns_ms}
    return {**out, "one after the other": one_after_another}


def races(loaded, prompt, raw, max_new, k, repeats, by_name, reported=False):
    """-> {schedule name: [(speed-up, plain seconds, speculative seconds) per race]}, and whether every
    race was identical to plain. reported: each speed-up is the median of the race's repeats."""
    settings = race_settings(prompt, max_new_tokens=max_new, k=k, raw=raw)
    ids, _ = prepare(loaded, settings)
    out, identical = {name: [] for name in by_name}, True
    for _ in range(repeats):
        for name, schedule in by_name.items():         # alternating, so a slow minute hits each
            *_, last = race(loaded, ids, settings, measure_costs=False, schedule=schedule, repeat=reported)
            ratio = statistics.median(last.speedups[0]) if reported else speedup(last.plain, last.spec)
            out[name].append((ratio, last.plain.seconds, last.spec.seconds))
            identical &= last.verdict.identical
    return out, identical


def tree_races(loaded, prompt, raw, max_new, k, tree, repeats, reported=False):
    """Races with a tree lane beside the chain lane. -> [(chain speed-up, tree speed-up, chain tokens per
    pass, tree tokens per pass) per race], and whether every race was identical to plain."""
    settings = race_settings(prompt, max_new_tokens=max_new, k=k, raw=raw, tree=tree)
    ids, _ = prepare(loaded, settings)
    out, identical = [], True
    for _ in range(repeats):
        *_, last = race(loaded, ids, settings, measure_costs=False, repeat=reported)
        chain, tree_x = (statistics.median(x) for x in last.speedups)
        out.append((chain, tree_x, last.lanes[0].per_pass, last.lanes[1].per_pass))
        identical &= last.verdict.identical
    return out, identical


def predicted_races(loaded, prompt, raw, max_new, args):
    """--repeats page races of one prompt, each with fresh cost terms. -> {lane name: [(measured median,
    predicted)]}, and whether every race was identical to plain."""
    settings = race_settings(prompt, max_new_tokens=max_new, k=args.k, raw=raw, temperature=args.temperature,
                             seed=0, rollback=args.rollback, tree=args.tree or "")
    ids, _ = prepare(loaded, settings)
    out, identical = {}, True
    for _ in range(args.repeats):
        costs.TABLE.forget()
        *_, last = race(loaded, ids, settings)
        for lane, terms, ratios in zip(last.lanes, last.lane_costs, last.speedups):
            name = f"tree {lane.tree}" if lane.tree else f"k={'auto' if lane.kept is not None else lane.k} {lane.rollback}"
            out.setdefault(name, []).append((statistics.median(ratios), costs.lane_prediction(terms, lane)))
        identical &= last.verdict.identical
    return out, identical


def print_prediction_table(loaded, args):
    print(f"settings: temperature {args.temperature}" + (" (shared noise, seed 0)" if args.temperature else " (greedy)")
          + f", rollback {args.rollback}" + (f", tree {args.tree}" if args.tree else ""))
    print("| prompt | lane | measured (median of medians) | range | predicted (median) | range | error |")
    print("|---|---|---|---|---|---|---|")
    for _, prompt, raw, max_new in EXAMPLES[:args.prompts]:
        rows, identical = predicted_races(loaded, prompt, raw, max_new, args)
        label = prompt[:24].replace("\n", " ").replace("|", "/") + "…"
        for name, pairs in rows.items():
            measured, predicted = [m for m, _ in pairs], [p for _, p in pairs]
            mid_m, mid_p = statistics.median(measured), statistics.median(predicted)
            print(f"| {label} | {name} | {mid_m:.3f}× | {min(measured):.2f}–{max(measured):.2f} | {mid_p:.3f}× | "
                  f"{min(predicted):.2f}–{max(predicted):.2f} | {mid_p / mid_m - 1:+.1%} |"
                  + ("" if identical else " NOT IDENTICAL"), flush=True)


def print_tree_table(loaded, args):
    print("| prompt | chain | tree | chain ÷ plain (median) | tree ÷ plain (median) | tree won | "
          "tokens per pass, chain | tree | every race, tree ÷ chain |")
    print("|---|---|---|---|---|---|---|---|---|")
    for _, prompt, raw, max_new in EXAMPLES[:args.prompts]:
        rows, identical = tree_races(loaded, prompt, raw, max_new, args.k, args.tree, args.repeats, args.reported)
        label = prompt[:24].replace("\n", " ").replace("|", "/") + "…"
        med = lambda i: statistics.median(r[i] for r in rows)       # noqa: E731
        print(f"| {label} | k={args.k} | {args.tree} | {med(0):.2f}× | {med(1):.2f}× | "
              f"{sum(t > c for c, t, _, _ in rows)} of {len(rows)} | {med(2):.2f} | {med(3):.2f} | "
              f"{' '.join(f'{t / c:.2f}' for c, t, _, _ in rows)} |"
              + ("" if identical else " NOT IDENTICAL to plain decoding in some race"), flush=True)


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def k_or_auto(text):
    return "auto" if text == "auto" else positive(text)


def turn_lengths(text):
    """"0,5,50" -> [0.0, 5.0, 50.0]: turn lengths in ms, each >= 0."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if any(not v >= 0 for v in values):
        raise argparse.ArgumentTypeError(f"turn lengths are >= 0 ms: {text!r}")
    return values


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a local folder or hub id (default: the embedded model)")
    parser.add_argument("--prompts", type=positive, default=None,
                        help="how many of the race's examples (default: 3; --predict: all)")
    parser.add_argument("--repeats", type=positive, default=8, help="races per prompt and schedule")
    parser.add_argument("--k", type=k_or_auto, default=2, help="draft tokens per round, or auto (up to AUTO_MAX_K)")
    parser.add_argument("--threads", type=positive, default=1,
                        help="torch threads (the app: one fewer than the cores)")
    parser.add_argument("--turns-ms", type=turn_lengths, default=[TURN_SECONDS * 1000],
                        help="comma-separated lengths of a turn to compare, in ms of engine time (the app's: "
                             f"{TURN_SECONDS * 1000:g}; 0: a turn per token or round)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--reported", action="store_true", help="each race as the page runs it, with its repeats")
    parser.add_argument("--tree", choices=[shape for shape in TREES if shape], default=None,
                        help="race a draft-tree lane of this shape beside the chain (every lane eager)")
    parser.add_argument("--predict", action="store_true",
                        help="the cost model's prediction against the measured median, per example prompt")
    parser.add_argument("--rollback", choices=RACE_ROLLBACKS, default="select", help="--predict: the race's rollback")
    parser.add_argument("--temperature", type=float, default=0.5, help="--predict: 0 for greedy (default: the page's)")
    args = parser.parse_args(argv)
    args.prompts = args.prompts or (len(EXAMPLES) if args.predict else 3)
    if args.tree:
        args.compile = False
    torch.set_num_threads(args.threads)
    source = args.model or find_model()
    loaded = load_model(source, source, compile=False)          # compiled below and waited for
    if loaded.mtp is None:
        parser.error(f"{source} has no MTP draft head (no mtp.* tensors): there is no race to run")
    if args.compile:                                            # k="auto" runs rounds of every length up to its most
        start_compiling(loaded, tuple(range(1, AUTO_MAX_K + 1)) if args.k == "auto" else (args.k,)).join()
    print(f"host: CPU capability {torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s); "
          f"model {loaded.key}, {loaded.compile_status()}; k={args.k}" + ("" if args.predict else ", select, greedy"))
    if args.predict:
        return print_prediction_table(loaded, args)
    if args.tree:
        return print_tree_table(loaded, args)
    print("| prompt | schedule | median | lowest | highest | plain lane (median) | speculative lane (median) | "
          "every race |")
    print("|---|---|---|---|---|---|---|---|")
    for _, prompt, raw, max_new in EXAMPLES[:args.prompts]:
        out, identical = races(loaded, prompt, raw, max_new, args.k, args.repeats, schedules(args.turns_ms),
                               args.reported)
        label = prompt[:24].replace("\n", " ").replace("|", "/") + "…"
        for name, rows in out.items():
            xs = [x for x, _, _ in rows]
            print(f"| {label} | {name} | {statistics.median(xs):.2f}× | {min(xs):.2f}× | {max(xs):.2f}× | "
                  f"{statistics.median(p for _, p, _ in rows):.3f} s | "
                  f"{statistics.median(q for _, _, q in rows):.3f} s | "
                  f"{' '.join(f'{x:.2f}' for x in xs)} |", flush=True)
        if not identical:
            print(f"| {label} | NOT IDENTICAL to plain decoding in some race | | | | | | |")


if __name__ == "__main__":
    main()
