"""Training corpus for the embedded demo checkpoint, built from Debian packages.

Everything here is read from files that Debian packages install, so the corpus
can be rebuilt on an offline machine with only the Debian archive reachable::

    apt-get install -y python3.11-doc fortunes-zh bible-kjv-text bible-kjv

Sources and their licences (as found on the build machine, Debian 12; the readers are in qwen/sources.py):

* ``python3.11-doc`` -- the reStructuredText sources of the Python 3.11
  documentation (``/usr/share/doc/python3.11/html/_sources/**/*.rst.txt``).
  Licence: PSF License Agreement for Python (the documentation is
  "Copyright (c) 2001-2023 Python Software Foundation", distributed under the
  PSF licence; see ``license.rst.txt`` in the same folder and
  ``/usr/share/doc/python3.11-doc/copyright``).  This is the dominant part of
  the corpus (English prose with reST markup and code).
* ``fortunes-zh`` -- classical Chinese poetry in fortune format (UTF-8):
  ``tang300`` (唐诗三百首), ``song100`` (宋词一百首) and the mixed ``chinese``
  file.  ``/usr/share/doc/fortunes-zh/copyright`` states GPL-3.0+ for the
  package (compiled by Yu Guanghui, Mo Zhou, xiao sheng wen); the poems
  themselves are classical texts (Tang/Song and earlier, and the 诗经,
  论语, 道德经 ...) that are in the public domain.  The ``chinese`` file also
  quotes modern, copyrighted authors and Debian documentation; those entries
  are dropped (see ``MODERN_MARKERS``), as is anything containing Latin
  letters.
* ``bible-kjv-text`` -- the King James Version (1611), public domain (the
  package copyright file: "The copyright for the King James Version text of
  the Bible is expired"; Crown rights apply only within the UK).  The text is
  stored compressed and is read back with the ``bible`` program from the
  ``bible-kjv`` package (GPL-2+, installed as a Recommends of
  ``bible-kjv-text``).  Only a selection of books is used (``KJV_BOOKS``).

Besides plain documents, a modest share of chat-formatted documents is
synthesised (questions about doc sections, requests to recite poems or
verses), rendered exactly as the tokenizer's chat template renders one
user turn followed by a non-thinking assistant turn (see ``qwen.bpe``)::

    <|im_start|>user
    Explain Decoding JSON.<|im_end|>
    <|im_start|>assistant
    <think>

    </think>

    ...answer...<|im_end|>

The train / held-out split is a deterministic hash of each document's *group*
(the plain document a chat document was derived from shares its group), so no
seed is involved and a question never lands on the other side of its source.

Command line::

    python -m qwen.corpus --out data/corpus

writes ``train.txt`` and ``heldout.txt``, each document followed by
``<|endoftext|>`` and a newline; ``read_corpus`` splits them back exactly.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from qwen.sources import (APT_COMMAND, BIBLE_DATA, FORTUNES_DIR, PYDOC_ROOT, Doc, MissingSourceError,
                          chinese_poetry_docs, kjv_docs, python_doc_docs, stable_hash)

DOC_SEPARATOR = "<|endoftext|>\n"
HELDOUT_PER_MILLE = 20  # 2 % of groups are held out


# assembling, splitting, files


def check_sources() -> None:
    """Raise ``MissingSourceError`` (with the apt-get command) if a source is missing."""
    missing = [str(p) for p in (PYDOC_ROOT, FORTUNES_DIR / "tang300", FORTUNES_DIR / "song100",
                                FORTUNES_DIR / "chinese", BIBLE_DATA) if not p.exists()]
    if shutil.which("bible") is None:
        missing.append("the `bible` program")
    if missing:
        raise MissingSourceError(
            "corpus sources not found: " + ", ".join(missing)
            + f"\nInstall the Debian packages with:\n    {APT_COMMAND}")


def is_heldout(doc: Doc) -> bool:
    """Deterministic 2 % held-out split by the hash of the document's group."""
    return stable_hash("split:" + doc.group) % 1000 < HELDOUT_PER_MILLE


def dedupe(docs: list[Doc]) -> list[Doc]:
    """Drop documents whose text already occurred (first one wins)."""
    seen, out = set(), []
    for doc in docs:
        if doc.text.strip() and doc.text not in seen and "<|endoftext|>" not in doc.text:
            seen.add(doc.text)
            out.append(doc)
    return out


def build_corpus() -> dict:
    """Build the corpus.

    Returns ``dict(train=list[str], heldout=list[str], sources=dict)`` where
    ``sources`` maps a source name (``python-docs``, ``python-docs-chat``,
    ``zh-poetry``, ``zh-poetry-chat``, ``kjv``, ``kjv-chat``) to
    ``(n_docs, n_chars)``.  Both lists are in a fixed, hash-shuffled order
    (sources interleaved), identical on every run.
    """
    check_sources()
    docs = dedupe(python_doc_docs() + chinese_poetry_docs() + kjv_docs())
    docs.sort(key=lambda d: stable_hash("order:" + d.text))
    sources: dict[str, tuple[int, int]] = {}
    for doc in docs:
        n, c = sources.get(doc.source, (0, 0))
        sources[doc.source] = (n + 1, c + len(doc.text))
    return dict(train=[d.text for d in docs if not is_heldout(d)],
                heldout=[d.text for d in docs if is_heldout(d)],
                sources=dict(sorted(sources.items())))


def write_docs(path: Path, docs: list[str]) -> None:
    """Write documents, each followed by ``DOC_SEPARATOR``."""
    assert all("<|endoftext|>" not in d for d in docs)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(d + DOC_SEPARATOR for d in docs))


def read_docs(path: Path) -> list[str]:
    """Inverse of ``write_docs``: ``read_docs(p) == docs`` exactly."""
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    if text and not text.endswith(DOC_SEPARATOR):
        raise ValueError(f"{path} does not end with the document separator")
    return text.split(DOC_SEPARATOR)[:-1]


def write_corpus(corpus: dict, folder: str | Path) -> None:
    """Write ``train.txt`` and ``heldout.txt`` into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_docs(folder / "train.txt", corpus["train"])
    write_docs(folder / "heldout.txt", corpus["heldout"])


def read_corpus(folder: str | Path) -> tuple[list[str], list[str]]:
    """Read ``(train_docs, heldout_docs)`` written by ``write_corpus``."""
    folder = Path(folder)
    return read_docs(folder / "train.txt"), read_docs(folder / "heldout.txt")


def summary(corpus: dict) -> str:
    """A small table of documents and characters per source and split."""
    rows = [f"{'source':<18}{'docs':>8}{'chars':>12}"]
    for name, (n, c) in corpus["sources"].items():
        rows.append(f"{name:<18}{n:>8}{c:>12,}")
    for split in ("train", "heldout"):
        docs = corpus[split]
        rows.append(f"{split:<18}{len(docs):>8}{sum(map(len, docs)):>12,}")
    nbytes = sum(len(d.encode("utf-8")) + len(DOC_SEPARATOR) for d in corpus["train"] + corpus["heldout"])
    rows.append(f"total size on disk: {nbytes / 1e6:.2f} MB")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="data/corpus", help="output folder")
    args = parser.parse_args()
    corpus = build_corpus()
    write_corpus(corpus, args.out)
    assert read_corpus(args.out) == (corpus["train"], corpus["heldout"])
    print(summary(corpus))
    print(f"wrote {args.out}/train.txt and {args.out}/heldout.txt")


if __name__ == "__main__":
    main()
