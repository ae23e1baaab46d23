"""The demo corpus: its documents gathered from the three sources, split train / held-out, written and read back.

    python -m qwen.train.corpus --out data/corpus      # -> data/corpus/train.txt, data/corpus/heldout.txt

Everything is read from files that Debian packages install, so the corpus can be rebuilt on an offline machine with
only the Debian archive reachable (qwen/train/sources.py has the apt-get command; the readers are pydocs.py,
poetry.py and kjv.py). Sources and their licences, as found on the build machine (Debian 12):

- python3.11-doc: the reStructuredText sources of the Python 3.11 documentation
  (/usr/share/doc/python3.11/html/_sources/**/*.rst.txt). PSF License Agreement for Python ("Copyright (c)
  2001-2023 Python Software Foundation"; license.rst.txt in the same folder, /usr/share/doc/python3.11-doc/copyright).
  The largest part of the corpus: English prose with reST markup and code.
- fortunes-zh: classical Chinese poetry in fortune format (tang300 唐诗三百首, song100 宋词一百首, the mixed `chinese`
  file). /usr/share/doc/fortunes-zh/copyright states GPL-3.0+ for the package (compiled by Yu Guanghui, Mo Zhou,
  xiao sheng wen); the poems themselves are classical texts (Tang/Song and earlier, 诗经, 论语, 道德经 ...) in the
  public domain. The `chinese` file also quotes modern, copyrighted authors and Debian documentation: those entries
  are dropped (poetry.MODERN_MARKERS), as is anything containing Latin letters.
- bible-kjv-text: the King James Version (1611), public domain (the package's copyright file: "The copyright for the
  King James Version text of the Bible is expired"; Crown rights apply only within the UK). Stored compressed and
  read back with the `bible` program of bible-kjv (GPL-2+). Only a selection of books (kjv.KJV_BOOKS).

Besides plain documents, a modest share of chat documents is made from them (questions about doc sections, requests
to recite poems or verses), rendered by the engine's chat template (qwen.chat.QWEN_TEMPLATE), which the tokenizer
ships: one user turn, then a reply with thinking switched off:

    <|im_start|>user
    Explain Decoding JSON.<|im_end|>
    <|im_start|>assistant
    <think>

    </think>

    ...answer...<|im_end|>

The train / held-out split is a hash of each document's group (a chat document shares the group of the document it
was made from), so no seed is involved and a question never lands on the other side of its source. Each file holds
its documents, each followed by "<|endoftext|>" and a newline; read_corpus splits them back exactly.
"""
import argparse
from pathlib import Path

from qwen.train.kjv import kjv_docs
from qwen.train.poetry import chinese_poetry_docs
from qwen.train.pydocs import python_doc_docs
from qwen.train.sources import check_sources, stable_hash

DOC_SEPARATOR = "<|endoftext|>\n"
HELDOUT_PER_MILLE = 20  # 2% of groups are held out


def is_heldout(doc):
    """Whether the document is held out: 2% of groups, by the hash of the group."""
    return stable_hash("split:" + doc.group) % 1000 < HELDOUT_PER_MILLE


def dedupe(docs):
    """The documents without repeats (the first one wins), empty ones, and any holding the separator's token."""
    seen, out = set(), []
    for doc in docs:
        if doc.text.strip() and doc.text not in seen and "<|endoftext|>" not in doc.text:
            seen.add(doc.text)
            out.append(doc)
    return out


def assemble(docs):
    """Documents from any sources -> {"train": [text], "heldout": [text], "sources": {source: (docs, chars)}}.
    Deduplicated, then in a hash-shuffled order (sources interleaved) that is the same on every run."""
    docs = sorted(dedupe(docs), key=lambda d: stable_hash("order:" + d.text))
    sources = {}
    for doc in docs:
        n, chars = sources.get(doc.source, (0, 0))
        sources[doc.source] = (n + 1, chars + len(doc.text))
    return {"train": [d.text for d in docs if not is_heldout(d)],
            "heldout": [d.text for d in docs if is_heldout(d)],
            "sources": dict(sorted(sources.items()))}


def build_corpus():
    """The corpus from the installed Debian sources (see assemble); MissingSourceError when one is missing.
    Its sources: python-docs, python-docs-chat, zh-poetry, zh-poetry-chat, kjv, kjv-chat."""
    check_sources()
    return assemble(python_doc_docs() + chinese_poetry_docs() + kjv_docs())


def write_docs(path, docs):
    """Write the documents, each followed by DOC_SEPARATOR."""
    assert all("<|endoftext|>" not in d for d in docs)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(d + DOC_SEPARATOR for d in docs))


def read_docs(path):
    """The documents write_docs wrote, exactly: read_docs(p) == docs."""
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    if text and not text.endswith(DOC_SEPARATOR):
        raise ValueError(f"{path} does not end with the document separator")
    return text.split(DOC_SEPARATOR)[:-1]


def write_corpus(corpus, folder):
    """Write train.txt and heldout.txt into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_docs(folder / "train.txt", corpus["train"])
    write_docs(folder / "heldout.txt", corpus["heldout"])


def read_corpus(folder):
    """(train docs, held-out docs) as write_corpus wrote them into `folder`."""
    folder = Path(folder)
    return read_docs(folder / "train.txt"), read_docs(folder / "heldout.txt")


def summary(corpus):
    """A small table: documents and characters per source and per split, and the size on disk."""
    rows = [f"{'source':<18}{'docs':>8}{'chars':>12}"]
    for name, (n, chars) in corpus["sources"].items():
        rows.append(f"{name:<18}{n:>8}{chars:>12,}")
    for split in ("train", "heldout"):
        docs = corpus[split]
        rows.append(f"{split:<18}{len(docs):>8}{sum(map(len, docs)):>12,}")
    size = sum(len(d.encode("utf-8")) + len(DOC_SEPARATOR) for d in corpus["train"] + corpus["heldout"])
    rows.append(f"total size on disk: {size / 1e6:.2f} MB")
    return "\n".join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qwen.train.corpus", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="data/corpus", help="output folder")
    args = parser.parse_args(argv)
    corpus = build_corpus()
    write_corpus(corpus, args.out)
    assert read_corpus(args.out) == (corpus["train"], corpus["heldout"])
    print(summary(corpus))
    print(f"wrote {args.out}/train.txt and {args.out}/heldout.txt")


if __name__ == "__main__":
    main()
