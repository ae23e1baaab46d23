"""Speculative == plain on the visitor's path, over many prompts: the Space's model as the app loads it (the stand-in
for Qwen/Qwen3.5-0.8B, qwen.standin: the host plan's dtype, its compiled graphs, the shipped draft vocabulary), every
k, rollback and sampling rule, counting the tokens where speculative decoding wrote something else than plain.

    python -m tools.exact_sweep [--prompts 20] [--prompt-tokens 64] [--new-tokens 128] [--ks 1,2,3,auto]
                                [--rollbacks select,recompute] [--sampling greedy,seeded] [--threads 2] [--json F]

Prompts are windows of real text (the README, the page's Chinese strings, the engine's code) in the real tokenizer.
Drafts are scripted (qwen.scripted, hit rate 0.7, missing outside the draft vocabulary): random weights guess
nothing, so a scripted head replaying plain decoding's own tokens is what makes rounds accept, roll back and verify
several rows. Seeded sampling (T = 0.7, shared noise) replays plain sampling's tokens, so its drafts hit too.
"""
import argparse
import json
import time

import torch

from qwen.compiled import default_dtype, warm_up
from qwen.model import Model
from qwen.adaptive import DraftLengths
from qwen.mtp import MTP, generate_mtp, lengths_for
from qwen.sample import generate
from qwen.scripted import ScriptedHead
from qwen.standin import QWEN35_08B, real_texts, standin_folder


def windows(ids_by_text, n, length):
    """n prompts of `length` ids, taken in turn from each text at evenly spaced places."""
    out = []
    for i in range(n):
        ids = ids_by_text[i % len(ids_by_text)]
        start = (i // len(ids_by_text)) * max(1, (len(ids) - length) // max(1, n // len(ids_by_text)))
        out.append(ids[start:start + length])
    return out


def main(argv=None):
    from tokenizers import Tokenizer
    ap = argparse.ArgumentParser(prog="python -m tools.exact_sweep", description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--ks", default="1,2,3,auto")
    ap.add_argument("--rollbacks", default="select,recompute")
    ap.add_argument("--sampling", default="greedy,seeded")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true", help="stay eager (the app compiles)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    folder = standin_folder()
    dtype, why = default_dtype("cpu", QWEN35_08B["hidden_size"])
    model = Model.from_pretrained(folder, dtype=dtype)
    head = MTP.from_pretrained(model.cfg, folder, dtype=dtype, lm_head=model.lm_head)
    ks = [k if k == "auto" else int(k) for k in args.ks.split(",")]
    rollbacks = args.rollbacks.split(",")
    t0 = time.perf_counter()
    if not args.no_compile:
        fixed = sorted({k for k in ks if k != "auto"} | ({1, 2, 3} if "auto" in ks else set()))
        report = warm_up(model, head, ks=fixed, rollbacks=rollbacks, keep_if_faster=False)
        model, head = report["model"], report["head"]
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {args.threads} threads, torch "
          f"{torch.__version__}; {str(dtype).replace('torch.', '')} ({why}); "
          f"{'eager' if args.no_compile else f'compiled in {time.perf_counter() - t0:.0f} s'}", flush=True)
    tokenizer = Tokenizer.from_file(f"{folder}/tokenizer.json")
    texts = [tokenizer.encode(t).ids for t in real_texts().values()] + \
        [tokenizer.encode(open("qwen/mtp.py", encoding="utf-8").read()).ids]
    prompts = [torch.tensor([p]) for p in windows(texts, args.prompts, args.prompt_tokens)]
    # k="auto" chooses by the seconds of a round of each length, measured once for this model and head (as the page
    # does), each run starting afresh from them
    seconds = lengths_for(model, head, 3).seconds if "auto" in ks else None
    rows = []
    for rule in args.sampling.split(","):
        how = {} if rule == "greedy" else dict(temperature=0.7, seed=3)
        plains = [generate(model, ids, max_new_tokens=args.new_tokens, **how) for ids in prompts]
        for k in ks:
            for rollback in rollbacks:
                mismatched, tokens, first = 0, 0, None
                for p, (ids, plain) in enumerate(zip(prompts, plains)):
                    scripted = ScriptedHead(head, ids[0].tolist() + plain, 0.7, seed=p)
                    auto = {"lengths": DraftLengths(seconds)} if k == "auto" else {}
                    out = generate_mtp(model, scripted, ids, args.new_tokens, k=k, rollback=rollback, **auto, **how)[0]
                    tokens += len(plain)
                    if out != plain:
                        mismatched += 1
                        at = next((i for i, (a, b) in enumerate(zip(out, plain)) if a != b), min(len(out), len(plain)))
                        first = first or {"prompt": p, "token": at}
                rows.append({"sampling": rule, "k": k, "rollback": rollback, "prompts": len(prompts),
                             "tokens": tokens, "prompts_mismatched": mismatched, "first_mismatch": first})
                print(json.dumps(rows[-1]), flush=True)
    print(f"{sum(r['prompts_mismatched'] for r in rows)} mismatched runs of {len(rows) * len(prompts)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"capability": torch.backends.cpu.get_cpu_capability(), "dtype": str(dtype), "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
