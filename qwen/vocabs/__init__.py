"""Draft vocabularies shipped with the engine, each tied to one tokenizer by a hash of its vocabulary.

A checkpoint may carry its own draft_vocab.json (the embedded one does); the hub's Qwen3.5 checkpoints carry none.
For them the engine ships qwen/vocabs/qwen3.5.json (built by `python -m qwen.train.qwen35_vocab`): the tokens most
frequent in English, Chinese and code under the Qwen3.5 tokenizer. It applies to any checkpoint whose tokenizer.json
holds exactly that vocabulary, whatever its size or fine-tuning, and to no other:

    ids = shipped_draft_vocab("path/to/Qwen3.5-0.8B", vocab_size=248320)     # sorted token ids, or None
"""
import hashlib
import json
import os
from pathlib import Path

VOCABS = Path(__file__).resolve().parent
SHIPPED = "qwen3.5.json"


def vocabulary_hash(vocab):
    """SHA-256 of a BPE vocabulary {token text: id}, independent of its order in the file."""
    text = json.dumps(sorted(vocab.items(), key=lambda kv: kv[1]), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tokenizer_hash(path):
    """vocabulary_hash of `path`/tokenizer.json's model vocabulary, or None where there is none to read."""
    file = os.path.join(path, "tokenizer.json")
    try:
        with open(file, encoding="utf-8") as f:
            vocab = json.load(f)["model"]["vocab"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return vocabulary_hash(vocab) if isinstance(vocab, dict) else None


def shipped_vocabs():
    """[(vocabulary hash, file)] of every vocabulary shipped here."""
    out = []
    for file in sorted(VOCABS.glob("*.json")):
        with open(file) as f:
            out.append((json.load(f)["vocabulary_sha256"], file))
    return out


def shipped_draft_vocab(path, vocab_size):
    """The shipped draft vocabulary for the tokenizer in `path`, as sorted token ids below vocab_size, or None where
    no shipped file matches that tokenizer. -> (ids, the file's record without its ids) or (None, None)"""
    digest = tokenizer_hash(path)
    for known, file in shipped_vocabs():
        if known == digest:
            with open(file) as f:
                record = json.load(f)
            ids = sorted(i for i in record.pop("token_ids") if 0 <= i < vocab_size)
            return ids, record
    return None, None
