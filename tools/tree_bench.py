"""Draft trees against chains, measured here (qwen/tree.py; docs/benchmarks.md has the figures).

    python -m tools.tree_bench                          # the embedded model, greedy, its held-out prompts
    python -m tools.tree_bench --shape 0.8b --rates 0.5,0.9 --second 0.3    # the 0.8B shape, scripted drafts

For each setting (chain k, tree shape): tokens per main-model pass, acceptance, speed-up over plain decoding
(plain and speculative alternating, the best of --repeats each), identical to plain; then the probability
that the head's second guess is right where its first is wrong (the rounds of trees with two or more
guesses at depth 1), what a verify pass of R rows costs in decode steps (a chain's R tokens and a tree's R
rows, which also carry every node's state), and the bytes a tree keeps per node. With --shape 0.8b the
drafts are scripted (qwen.scripted) at each hit rate, the true token ranked second at rate --second where
the first guess misses. Printed with the CPU capability torch uses.
"""
import argparse
import statistics

import torch

from qwen import tree as trees
from qwen.trace import Watch
from qwen.bench import PROMPTS, best_of_pair, print_table, random_head, random_model
from qwen.costs import Pass, time_pass
from qwen.mtp import generate_mtp
from qwen.sample import generate
from qwen.scripted import ScriptedHead

DEFAULT_SHAPES = "2,3,2+1,2+1+1,2x2,3+1"


class Rounds(Watch, list):
    """A Watch that keeps every qwen.mtp.Round it hears."""

    def round_ended(self, number, r, emitted, rollback, state, head_cache, sampling):
        self.append(r)


def second_guess(rounds):
    """Of rounds whose tree tried two or more guesses at depth 1: -> (first right, second right where the
    first was wrong, rounds where the first was wrong)"""
    ranks = [r.guesses[r.path[1]].rank if len(r.path) > 1 else None for r in rounds if len(r.tree.children[0]) > 1]
    wrong = sum(rank != 0 for rank in ranks)
    return sum(rank == 0 for rank in ranks), sum(rank == 1 for rank in ranks), wrong


def compare(model, ids, settings, drafter, repeats, new_tokens, rows, recorded):
    """Each setting (("chain", k) or ("tree", shape)) against plain decoding of ids, alternating; recorded
    (Rounds) hears the tree rounds."""
    for kind, value in settings:
        tree = value if kind == "tree" else None
        (plain, t_plain), ((spec, rounds, hits), t) = best_of_pair(
            repeats, lambda: generate(model, ids, new_tokens),
            lambda: generate_mtp(model, drafter(), ids, new_tokens, k=value if kind == "chain" else 1, tree=tree,
                                 trace=recorded if tree else None))
        depth = trees.parse_tree(tree).depth if tree else value
        rows.append({"setting": f"{kind} {value}", "tokens_per_pass": (len(spec) - 1) / max(1, rounds),
                     "acceptance": hits / max(1, rounds * depth), "speedup": t_plain / t * len(spec) / len(plain),
                     "identical": spec == plain})


def summarise(rows):
    out = {}
    for r in rows:
        s = out.setdefault(r["setting"], {"tokens_per_pass": [], "acceptance": [], "speedup": [], "identical": True})
        for key in ("tokens_per_pass", "acceptance", "speedup"):
            s[key].append(r[key])
        s["identical"] &= r["identical"]
    return [{"setting": name, **{k: statistics.mean(v) if isinstance(v, list) else v for k, v in s.items()}}
            for name, s in out.items()]


@torch.inference_mode()
def rows_in_steps(model, max_rows, reps=7):
    """A verify pass of R rows in decode steps: the chain's (R tokens, keeping step states) and the tree's
    (the root and R-1 guesses at depth 1), each the median of reps, taking turns with the step (time_pass)."""
    out = []
    for R in range(2, max_rows + 1):
        seconds = time_pass(model, {"step": Pass(1), "chain": Pass(R, keep=True),
                                    "tree": Pass(R, keep=True, tree=trees.parse_tree(str(R - 1)))}, repeats=reps)
        out.append({"rows": R, "chain_in_steps": seconds["chain"] / seconds["step"],
                    "tree_in_steps": seconds["tree"] / seconds["step"]})
    return out


def kept_bytes_per_node(model):
    """Bytes a tree keeps per node: every DeltaNet layer's memory and conv window after it."""
    cfg = model.cfg
    conv = (2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + cfg.linear_num_value_heads * cfg.linear_value_head_dim) \
        * (cfg.linear_conv_kernel_dim - 1) * model.embed_tokens.weight.element_size()
    S = cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
    return sum(kind == "linear_attention" for kind in cfg.layer_types) * (conv + S)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tools.tree_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a checkpoint (default: the embedded model)")
    ap.add_argument("--shape", choices=["0.8b"], default=None, help="random weights of this shape, scripted drafts")
    ap.add_argument("--ks", default="1,2,3")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="tree shapes, comma-separated")
    ap.add_argument("--rates", default="0.5,0.9", help="with --shape: the scripted hit rates")
    ap.add_argument("--second", type=float, default=0.3, help="with --shape: the second guess's rate where the first misses")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=120)
    ap.add_argument("--max-rows", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"host: CPU capability {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    settings = [("chain", int(k)) for k in args.ks.split(",")] + [("tree", s) for s in args.shapes.split(",")]
    recorded = Rounds()
    if args.shape:
        model, _ = random_model(torch.bfloat16)
        head = random_head(model.cfg, torch.bfloat16)
        ids = torch.randint(0, 248000, (1, 64), generator=torch.Generator().manual_seed(1))
        transcript = ids[0].tolist() + generate(model, ids, args.new_tokens)
        for rate in args.rates.split(","):
            rows = []
            compare(model, ids, settings, lambda: ScriptedHead(head, transcript, float(rate), seed=3, second_rate=args.second),
                    args.repeats, args.new_tokens, rows, recorded)
            print(f"\nscripted hit rate {rate}, second guess {args.second} where the first misses (0.8B shape, bfloat16)")
            print_table(summarise(rows))
    else:
        from qwen.chat import Chat
        from qwen.model import Model
        from qwen.mtp import MTP
        from qwen.weights import find_model
        path = find_model(args.model)
        model = Model.from_pretrained(path)
        head = MTP.from_pretrained(model.cfg, path, lm_head=model.lm_head)
        chat, rows = Chat(model, path), []
        for prompt in PROMPTS:
            compare(model, chat.encode(prompt), settings, lambda: head, args.repeats, args.new_tokens, rows, recorded)
        print(f"\n{path}, greedy, {len(PROMPTS)} prompts, {args.new_tokens} tokens (means over prompts)")
        print_table(summarise(rows))
    first, second, wrong = second_guess(recorded)
    print(f"\nthe head's first guess right in {first} of {first + wrong} tree rounds; where it was wrong, the second "
          f"was right in {second} of {wrong} ({second / max(1, wrong):.2f})")
    print(f"\nverify of R rows in decode steps; a tree keeps {kept_bytes_per_node(model) / 2**20:.2f} MiB per node")
    print_table(rows_in_steps(model, args.max_rows))


if __name__ == "__main__":
    main()
