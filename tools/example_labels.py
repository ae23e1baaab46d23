"""How well the embedded model's draft head guesses each example prompt, measured: the examples table's labels.

    python -m tools.example_labels            # measures every example, prints a table, writes EXAMPLES_FILE
    python -m tools.example_labels --check    # measures again and says whether the file still holds

Each example runs once as the page races it by default (k = 2, sampled at 0.5 with shared noise, seed 0; the
eager engine, whose tokens are the reference), and the share of drafted tokens the main model kept is stored
per prompt in demo/examples_measured.json, which the app reads (demo.prompts.measured). The table labels a
prompt "easy to guess" only where that share is at least EASY; the labels say the share. A test measures the page's two defaults again and compares them with the file.
"""
import argparse
import json

from demo.prompts import EASY, EXAMPLES, EXAMPLES_FILE, measured, prepare, sampling
from demo.validate import race_settings

K, TEMPERATURE, SEED = 2, 0.5, 0


def acceptance(loaded, prompt, raw, max_new):
    """(share of drafts kept, new tokens) of one speculative run of `prompt` with the page's default settings."""
    from qwen.mtp import generate_mtp
    settings = race_settings(prompt, max_new_tokens=max_new, k=K, raw=raw, temperature=TEMPERATURE, seed=SEED)
    ids, _ = prepare(loaded, settings)
    tokens, rounds, hits = generate_mtp(loaded.model, loaded.mtp, ids, settings.max_new_tokens, loaded.chat.stop,
                                        k=K, **sampling(settings))
    return (hits / (rounds * K) if rounds else 0.0), len(tokens)


def measure_all(loaded):
    rows = []
    for kind, prompt, raw, max_new in EXAMPLES:
        kept, tokens = acceptance(loaded, prompt, raw, max_new)
        rows.append({"kind": kind, "prompt": prompt, "kept": round(kept, 4), "tokens": tokens})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    args = parser.parse_args(argv)
    import torch
    from demo.models import ModelStore
    torch.set_num_threads(1)
    loaded = ModelStore().get()                      # the embedded checkpoint
    rows = measure_all(loaded)
    print(f"embedded model, k={K}, temperature {TEMPERATURE} (shared noise, seed {SEED}); easy from {EASY:.0%}")
    print("| kind | prompt | drafts kept | new tokens | label |")
    print("|---|---|---|---|---|")
    for r in rows:
        label = "easy to guess" if r["kept"] >= EASY else "harder to guess"
        print(f"| {r['kind']} | {r['prompt'][:30]!r} | {r['kept']:.1%} | {r['tokens']} | {label} |")
    if args.check:
        held = measured() == {r["prompt"]: r["kept"] for r in rows}
        print("the file holds" if held else f"{EXAMPLES_FILE} is out of date: run python -m tools.example_labels")
        return 0 if held else 1
    with open(EXAMPLES_FILE, "w", encoding="utf-8") as f:
        json.dump({"model": "embedded", "k": K, "temperature": TEMPERATURE, "seed": SEED, "examples": rows}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {EXAMPLES_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
