"""The embedded checkpoint's tokenizer: byte-level BPE, trained with the `tokenizers` library on the corpus.

    python -m qwen.train.bpe --corpus data/corpus --out data/tok --vocab-size 8192

The pipeline has the shape of Qwen2/Qwen3's tokenizer:
- no normaliser, so every string round-trips exactly (Qwen applies NFC);
- pre-tokeniser: Qwen's regex split (letter runs, single digits, punctuation runs, whitespace), then GPT-2's
  byte-level mapping, so any UTF-8 text (Chinese included) is spelled from the 256 byte symbols:
      "Hello world, 2024年!" -> "Hello", " world", ",", " ", "2", "0", "2", "4", "年", "!"
- a BPE model with no unknown token, and a byte-level decoder.

Vocabulary layout for vocab_size V (default 8192):

    0 .. 255        the 256 byte symbols
    256 .. V-6      learned merges
    V-5 .. V-1      <|endoftext|>, <|im_start|>, <|im_end|>, <think>, </think>

The special tokens are matched as whole strings before BPE, so each is one id. <|im_end|> ends a chat turn and is
the end-of-sequence token; <|endoftext|> pads and separates the corpus's documents.

save_tokenizer writes tokenizer.json and tokenizer_config.json, with the engine's chat template
(qwen.chat.QWEN_TEMPLATE). subtle: the config names PreTrainedTokenizerFast, not Qwen2Tokenizer. transformers 5
rebuilds a Qwen2Tokenizer's pipeline from the vocabulary and adds an NFC normaliser, whereas PreTrainedTokenizerFast
loads tokenizer.json as it is, so that AutoTokenizer and `tokenizers` agree.
"""
import argparse
import json
import re
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from qwen.chat import QWEN_TEMPLATE
from qwen.train.corpus import read_corpus

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

# The pre-tokenisation regex of Qwen2 / Qwen3 (tokenizer.json's "Split" step).
QWEN_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                      r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def new_tokenizer():
    """An untrained byte-level BPE tokenizer with Qwen's pre-tokenisation."""
    tk = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tk.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tk.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    return tk


def between_special_tokens(docs):
    """The pieces of each document between special-token strings, so that BPE spends no merges on them.
        ["<|im_start|>user\\nHi<|im_end|>\\n"] -> "user\\nHi", "\\n" """
    special = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
    for doc in docs:
        for piece in special.split(doc):
            if piece:
                yield piece


def train_tokenizer(docs, vocab_size=8192):
    """A tokenizer trained on `docs`, with exactly `vocab_size` ids, the last five SPECIAL_TOKENS in order.
    Merges are learnt while a pair occurs at least twice; ValueError when the documents run out of such pairs
    before vocab_size."""
    learned = vocab_size - len(SPECIAL_TOKENS)                  # byte symbols + merges
    if learned <= 256:
        raise ValueError(f"vocab_size must exceed {256 + len(SPECIAL_TOKENS)}")
    tk = new_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=learned, min_frequency=2, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(between_special_tokens(docs), trainer=trainer)
    if tk.get_vocab_size() != learned:
        raise ValueError(f"corpus too small: learned {tk.get_vocab_size()} of {learned} tokens")
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tk


def tokenizer_config(tk, model_max_length):
    """The contents of tokenizer_config.json for `tk`: its special tokens and the chat template."""
    added = {str(tk.token_to_id(t)): dict(content=t, lstrip=False, normalized=False, rstrip=False, single_word=False,
                                          special=True)
             for t in SPECIAL_TOKENS}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "model_max_length": model_max_length,
        "chat_template": QWEN_TEMPLATE,
    }


def save_tokenizer(tk, folder, model_max_length=2048):
    """Write tokenizer.json and tokenizer_config.json into `folder`: the layout AutoTokenizer and Chat load."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tk.save(str(folder / "tokenizer.json"))
    config = tokenizer_config(tk, model_max_length)
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                                  encoding="utf-8")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qwen.train.bpe", description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="data/corpus", help="folder written by qwen.train.corpus")
    parser.add_argument("--out", required=True, help="output folder for the tokenizer files")
    parser.add_argument("--vocab-size", type=int, default=8192, help="total ids, specials included")
    parser.add_argument("--max-length", type=int, default=2048, help="model_max_length to record")
    args = parser.parse_args(argv)
    train, heldout = read_corpus(args.corpus)
    tk = train_tokenizer(train, args.vocab_size)
    save_tokenizer(tk, args.out, args.max_length)
    for name, docs in (("train", train), ("heldout", heldout)):
        n_tokens = sum(len(e.ids) for e in tk.encode_batch(docs, add_special_tokens=False))
        n_chars = sum(map(len, docs))
        print(f"{name}: {len(docs)} docs, {n_chars:,} chars, {n_tokens:,} tokens "
              f"({n_tokens / max(n_chars, 1):.3f} tokens/char)")
    print(f"vocab size {tk.get_vocab_size()}; wrote {args.out}/tokenizer.json and tokenizer_config.json")


if __name__ == "__main__":
    main()
