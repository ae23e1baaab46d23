"""Command line: generate from a model, streaming text to the terminal.

    python -m qwen "The LORD is my shepherd;"                   # embedded demo model, raw completion
    python -m qwen --mtp 2 "The LORD is my shepherd;"           # the same text, speculatively (k = 2)
    python -m qwen --mtp auto "The LORD is my shepherd;"        # each round drafts 0..3 tokens, as far as it pays
    python -m qwen --temperature 0 "The LORD is my shepherd;"   # greedy
    python -m qwen --tree 2+1 "The LORD is my shepherd;"        # a draft tree per round (qwen.tree; eager)
    python -m qwen --model Qwen/Qwen3.5-0.8B --chat --mtp 2 "用一句话介绍一下 Transformer。"

Samples as the page races: temperature 0.5, seed 0, noise shared with speculative decoding, so --mtp
writes the same text (greedy decoding loops on the small embedded model). Ends with the number of
tokens, seconds and tok/s (and, with --mtp, rounds and acceptance). The decoding steps are compiled
first (qwen.compiled; --no-compile stays eager), from a disk cache after the first run.
"""
import argparse
import sys
import time

import torch

from qwen.chat import Chat, Detokenizer
from qwen.compiled import default_dtype, warm_up
from qwen.compiled.host import host_plan
from qwen.config import read_config
from qwen.model import Model
from qwen.mtp import MTP, generate_mtp_stream, lengths_for
from qwen.sample import generate_stream
from qwen.tree import parse_tree
from qwen.weights import find_model

TEMPERATURE = 0.5           # the page's (demo.choices.PAGE_TEMPERATURE): reads far better than greedy here


def draft_length(text):
    """--mtp's value: a number of draft tokens, or "auto"."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of draft tokens or 'auto', not {text!r}") from None


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qwen", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prompt")
    ap.add_argument("--model", default=None, help="model folder or hub id (default: $QWEN_MODEL or the embedded demo)")
    ap.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    ap.add_argument("--think", action="store_true", help="with --chat: let the model think first")
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--temperature", type=float, default=TEMPERATURE,
                    help=f"sampling temperature (default {TEMPERATURE}, as the page races); 0: greedy")
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0, help="sampling's seed: with --mtp, the same text as without")
    ap.add_argument("--rejection", action="store_true",
                    help="with --mtp and sampling: the textbook rejection rule (same distribution, other text) "
                         "instead of noise shared with plain sampling")
    ap.add_argument("--mtp", type=draft_length, default=0, metavar="K",
                    help="speculative decoding with K draft tokens, or 'auto': each round 0..--max-k, as far as it "
                         "pays on this host (its round costs measured first, a few seconds)")
    ap.add_argument("--max-k", type=int, default=3, help="with --mtp auto: the longest draft (default 3)")
    ap.add_argument("--tree", default=None, metavar="SHAPE",
                    help='speculative decoding with a draft tree per round instead of a chain: "2+1", "2x2" (eager)')
    ap.add_argument("--rollback", default="select", choices=["select", "recompute"])
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                    help="default: bfloat16 where the hardware multiplies it natively (on CPU only for "
                         "models of hidden size >= 1024), else float32")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                    help="compile the decoding steps first (default; falls back to eager, saying why)")
    args = ap.parse_args(argv)
    try:
        if args.tree:                                   # a tree drafts as deep as its longest path; it runs eagerly
            args.mtp, args.compile = parse_tree(args.tree).depth, False
        path = find_model(args.model)
        dtype, reason = (getattr(torch, args.dtype), "--dtype") if args.dtype else \
            default_dtype(args.device, read_config(path).hidden_size)
        model = Model.from_pretrained(path, dtype=dtype, device=args.device)
        chat = Chat(model, path)
        head = MTP.from_pretrained(model.cfg, path, dtype=dtype, device=args.device,
                                    lm_head=model.lm_head) if args.mtp else None
    except (OSError, ValueError) as e:
        sys.exit(f"error: {e}")
    ks = tuple(range(1, args.max_k + 1)) if args.mtp == "auto" else (args.mtp,) if args.mtp else ()
    plan = host_plan(model, f"{str(dtype).replace('torch.', '')}: {reason}", args.compile, ks=ks,
                     eager_why="draft trees run eagerly" if args.tree else "compiling not asked for")
    print(f"[{plan}: {plan.why}]", file=sys.stderr)
    if args.compile and plan.strategy is not None:
        print("[compiling the decoding steps (cached on disk for the next run)…]", file=sys.stderr, flush=True)
        report = warm_up(model, head, ks=ks, rollbacks=(args.rollback,),
                         only_greedy=not args.temperature)
        speed = ", ".join(f"{name} {x:.2f}x" for name, x in report.get("speedups", {}).items())
        print(f"[{report['status']} in {report['seconds']:.0f} s" + (f"; eager / compiled: {speed}" if speed else "")
              + "]", file=sys.stderr)
        model, head = report["model"], report["head"]                  # the compiled views decode
    try:
        if args.chat:
            ids = chat.encode_chat([{"role": "user", "content": args.prompt}],
                                   enable_thinking=args.think if chat.supports_thinking else None)
        else:
            ids = chat.encode(args.prompt)
    except ValueError as e:                             # the chat template refused the conversation
        sys.exit(f"error: {e}")
    sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    if args.rejection:
        sampling["generator"] = torch.Generator().manual_seed(args.seed)
    else:
        sampling["seed"] = args.seed
    lengths = None
    if args.mtp == "auto":
        print(f"[timing a round of each length 0..{args.max_k} on this host…]", file=sys.stderr, flush=True)
        try:
            lengths = lengths_for(model, head, args.max_k, bool(args.temperature))
        except ValueError as e:
            sys.exit(f"error: {e}")
    try:
        if head is None:
            stream = ((tok, None) for tok in generate_stream(model, ids, args.max_new_tokens, chat.stop, **sampling))
        else:
            stream = ((tok, stats) for emitted, *stats in generate_mtp_stream(
                model, head, ids, args.max_new_tokens, chat.stop, k=args.mtp, rollback=args.rollback, tree=args.tree,
                lengths=lengths, **sampling)
                for tok, _ in emitted)
        tokens, stats, detok, start = [], None, Detokenizer(chat.decode), time.perf_counter()
        for tok, stats in stream:
            tokens.append(tok)
            if tok not in chat.stop:
                print(detok.push(tok), end="", flush=True)
        print(detok.flush(), end="")
        seconds = time.perf_counter() - start
    except ValueError as e:
        sys.exit(f"error: {e}")
    line = f"\n\n{len(tokens)} tokens, {seconds:.2f} s, {len(tokens) / seconds:.1f} tok/s"
    if stats:
        rounds, hits = stats
        if lengths is not None:
            kept = ", ".join(f"{m}: {lengths.counts.get(m, 0)}" for m in range(args.max_k + 1))
            line += f"; {rounds} rounds, {hits} drafts accepted; rounds by drafts kept {{{kept}}}"
        else:
            line += f"; {rounds} rounds, {hits} drafts accepted ({hits / max(1, rounds * args.mtp):.0%})"
    print(line)


if __name__ == "__main__":
    main()
