"""The embedded checkpoint's draft vocabulary (FR-Spec): the tokens the MTP head's guesses are scored over.

    python -m qwen.train.draft_vocab --corpus data/corpus --checkpoint assets --size 2048
        -> assets/draft_vocab.json: {"token_ids": [...], "size": 2048, "coverage": ...}

A draft pass ends in the output layer, which the head shares with the main model: for the embedded model
its 8192 x 192 matrix is a third of all the weights, read twice a round (once per draft pass) where plain
decoding reads it once a token. Scoring only the most frequent tokens of the training corpus cuts those
reads; verification stays full-vocabulary, so the output is unchanged, and a draft outside the list is
simply never guessed. MTP.from_pretrained(..., lm_head=) applies the file when the checkpoint has one.
"""
import argparse
import json
import os

from tokenizers import Tokenizer

from qwen.config import read_config
from qwen.mtp import DRAFT_VOCAB_FILE, frequency_ranked_vocab
from qwen.train.bpe import EOS_TOKEN, PAD_TOKEN
from qwen.train.corpus import read_corpus


def draft_vocab(texts, tokenizer, vocab_size, size, always=()):
    """The `size` most frequent token ids of `texts` under `tokenizer`, plus `always` (stop tokens).
    -> (sorted ids, the share of the texts' tokens they cover)"""
    token_lists = [e.ids for e in tokenizer.encode_batch(texts)]
    ids = frequency_ranked_vocab(token_lists, vocab_size, size, always)
    kept = set(ids)
    total = sum(len(t) for t in token_lists)
    covered = sum(1 for t in token_lists for i in t if i in kept)
    return ids, covered / max(total, 1)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qwen.train.draft_vocab", description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="data/corpus", help="folder with train.txt (python -m qwen.train.corpus)")
    parser.add_argument("--checkpoint", default="assets", help="checkpoint folder: its tokenizer and config are "
                        "read, and draft_vocab.json is written there")
    parser.add_argument("--size", type=int, default=2048, help="how many of the most frequent tokens to keep")
    args = parser.parse_args(argv)
    cfg = read_config(args.checkpoint)
    if not 0 < args.size <= cfg.vocab_size:
        parser.error(f"--size must be between 1 and the vocabulary size {cfg.vocab_size}")
    train, _ = read_corpus(args.corpus)
    tokenizer = Tokenizer.from_file(os.path.join(args.checkpoint, "tokenizer.json"))
    stops = [tokenizer.token_to_id(t) for t in (EOS_TOKEN, PAD_TOKEN)]         # a draft may guess the end
    ids, coverage = draft_vocab(train, tokenizer, cfg.vocab_size, args.size, always=stops)
    out = os.path.join(args.checkpoint, DRAFT_VOCAB_FILE)
    with open(out, "w") as f:
        json.dump({"about": f"the {args.size} most frequent tokens of the training corpus, plus the stop tokens; "
                   "the MTP draft scores only these (FR-Spec)", "size": args.size,
                   "coverage": round(coverage, 4), "token_ids": ids}, f)
    print(f"{len(ids)} token ids covering {coverage:.1%} of the corpus's tokens; wrote {out}")


if __name__ == "__main__":
    main()
