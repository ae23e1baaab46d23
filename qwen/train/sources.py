"""What the demo corpus is made of: three Debian packages, read into Docs, and chat documents made from them.

    apt-get install -y python3.11-doc fortunes-zh bible-kjv-text bible-kjv

One reader per source, each returning Docs (plain documents and a share of chat documents derived from them):
qwen/train/pydocs.py (the Python documentation's reST sources, cut into sections), qwen/train/poetry.py (classical
Chinese poems) and qwen/train/kjv.py (King James Bible chapters). Licences are listed in qwen/train/corpus.py.

Every choice (which section gets a question, which wording, which side of the split) is a hash of the text, not a
random draw: the corpus is the same on every machine and every run, with no seed.
"""
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from qwen.chat import QWEN_TEMPLATE, compile_template

APT_COMMAND = "apt-get install -y python3.11-doc fortunes-zh bible-kjv-text bible-kjv"
PYDOC_ROOT = Path("/usr/share/doc/python3.11/html/_sources")
FORTUNES_DIR = Path("/usr/share/games/fortunes")
BIBLE_DATA = Path("/usr/lib/bible.data")

SYSTEM_PROMPT = "You are a helpful assistant."
# The engine's chat template, the one the tokenizer ships (qwen/train/bpe.py): a chat document is rendered exactly
# as the model's prompts and replies will be.
COMPILED_TEMPLATE = compile_template(QWEN_TEMPLATE)


class MissingSourceError(RuntimeError):
    """A Debian package that provides corpus text is not installed."""


@dataclass(frozen=True)
class Doc:
    """One corpus document."""
    source: str     # the corpus part: "python-docs", "python-docs-chat", "zh-poetry", "kjv-chat", ...
    text: str
    group: str      # the text whose hash decides train vs held-out: a chat document carries its source's text,
                    # so a question never lands on the other side of the document it was made from


def check_sources():
    """Raise MissingSourceError, naming what is missing and the apt-get command, unless every source is installed."""
    missing = [str(p) for p in (PYDOC_ROOT, FORTUNES_DIR / "tang300", FORTUNES_DIR / "song100",
                                FORTUNES_DIR / "chinese", BIBLE_DATA) if not p.exists()]
    if shutil.which("bible") is None:
        missing.append("the `bible` program")
    if missing:
        raise MissingSourceError("corpus sources not found: " + ", ".join(missing)
                                 + f"\nInstall the Debian packages with:\n    {APT_COMMAND}")


def stable_hash(text):
    """A seed-free 64-bit hash of `text`: the first 8 bytes of its SHA-256, big-endian.
        "" -> 0xe3b0c44298fc1c14 (SHA-256 of nothing starts e3b0c442...)"""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def choose(options, key):
    """One of `options`, chosen by the hash of `key`: the same one on every run."""
    return options[stable_hash("pick:" + key) % len(options)]


def chat_doc(source, group, question, answer):
    """A one-turn chat document, rendered by the chat template; one in four also carries a system prompt.
        ("Hi", "Hello!") -> "<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\nHello!<|im_end|>\\n"
    The reply gets an empty think block, as a reply with thinking switched off does."""
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    if stable_hash("system:" + question) % 4 == 0:
        messages.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
    return Doc(source, COMPILED_TEMPLATE.render(messages=messages, add_generation_prompt=False), group)
