"""Byte-level BPE tokenizer for the embedded demo checkpoint.

The tokenizer is trained with the Hugging Face ``tokenizers`` library on the
training documents of ``qwen.corpus`` and saved in the Hugging Face layout, so
that ``transformers.AutoTokenizer.from_pretrained(folder)`` loads it.

Pipeline (the same shape as Qwen2/Qwen3's tokenizer):

* no normaliser (so every string round-trips exactly; Qwen applies NFC),
* pre-tokeniser: the Qwen regex split (letters runs, single digits,
  punctuation runs, whitespace), then GPT-2 byte-level mapping, so any UTF-8
  text -- Chinese included -- is representable from the 256 byte symbols,
* BPE model with no unknown token, byte-level decoder.

Vocabulary layout for ``vocab_size = V`` (default 8192)::

    0 .. 255        the 256 byte symbols
    256 .. V-6      learned merges
    V-5 .. V-1      <|endoftext|>, <|im_start|>, <|im_end|>, <think>, </think>

The special tokens are matched as whole strings before BPE, so each is a
single id.  ``<|im_end|>`` is the end-of-sequence token (chat turns end with
it), ``<|endoftext|>`` is padding and the document separator of the corpus.

Files written by ``save_tokenizer``: ``tokenizer.json`` and
``tokenizer_config.json`` (with the chat template, ``CHAT_TEMPLATE``).  The
config names ``PreTrainedTokenizerFast`` rather than ``Qwen2Tokenizer``:
transformers 5 rebuilds a ``Qwen2Tokenizer`` pipeline from the vocabulary and
adds an NFC normaliser, whereas ``PreTrainedTokenizerFast`` loads
``tokenizer.json`` as it is, so ``AutoTokenizer`` and ``tokenizers`` agree.

Command line::

    python -m qwen.bpe --corpus data/corpus --out assets/tokenizer --vocab-size 8192
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Iterable, Iterator

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

# The pre-tokenisation regex of Qwen2 / Qwen3 (tokenizer.json "Split" step).
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# A simplified Qwen3 chat template: system/user/assistant turns, no tools.
# The assistant turn(s) after the last user message carry a think block
# (empty when there is no reasoning); earlier assistant turns are plain.
# With add_generation_prompt the assistant header is opened, followed by an
# empty think block when enable_thinking is false, or by "<think>\n".
CHAT_TEMPLATE = r"""{%- set ns = namespace(last_query_index=-1) -%}
{%- for message in messages -%}
    {%- if message.role == 'user' -%}{%- set ns.last_query_index = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
    {%- set content = message.content if message.content is string else '' -%}
    {%- if message.role == 'assistant' -%}
        {%- set reasoning_content = '' -%}
        {%- if message.reasoning_content is string -%}
            {%- set reasoning_content = message.reasoning_content -%}
        {%- elif '</think>' in content -%}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
            {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
        {%- endif -%}
        {%- if loop.index0 > ns.last_query_index -%}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}
        {%- else -%}
            {{- '<|im_start|>assistant\n' + content -}}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if enable_thinking is defined and enable_thinking is false -%}
        {{- '<think>\n\n</think>\n\n' -}}
    {%- else -%}
        {{- '<think>\n' -}}
    {%- endif -%}
{%- endif -%}"""


def new_tokenizer() -> Tokenizer:
    """An untrained byte-level BPE tokenizer with Qwen's pre-tokenisation."""
    tk = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tk.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tk.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    return tk


def without_special(docs: Iterable[str]) -> Iterator[str]:
    """The pieces of each document between special-token strings, so that
    BPE does not spend merges on ``<|im_start|>`` and friends.

    >>> list(without_special(["<|im_start|>user\\nHi<|im_end|>\\n"]))
    ['user\\nHi', '\\n']
    """
    pattern = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
    for doc in docs:
        for piece in pattern.split(doc):
            if piece:
                yield piece


def train_tokenizer(docs: Iterable[str], vocab_size: int = 8192) -> Tokenizer:
    """Train on ``docs``; the result has exactly ``vocab_size`` ids, the last
    five being ``SPECIAL_TOKENS`` in order (see the module docstring)."""
    learned = vocab_size - len(SPECIAL_TOKENS)
    if learned <= 256:
        raise ValueError(f"vocab_size must exceed {256 + len(SPECIAL_TOKENS)}")
    tk = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=learned, min_frequency=2, show_progress=False, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tk.train_from_iterator(without_special(docs), trainer=trainer)
    if tk.get_vocab_size() != learned:
        raise ValueError(f"corpus too small: learned {tk.get_vocab_size()} of {learned} tokens")
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tk


def tokenizer_config(tk: Tokenizer, model_max_length: int) -> dict:
    """The ``tokenizer_config.json`` contents for ``tk``."""
    added = {
        str(tk.token_to_id(t)): dict(content=t, lstrip=False, normalized=False, rstrip=False,
                                     single_word=False, special=True)
        for t in SPECIAL_TOKENS
    }
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
        "chat_template": CHAT_TEMPLATE,
    }


def save_tokenizer(tk: Tokenizer, folder: str | Path, model_max_length: int = 2048) -> None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tk.save(str(folder / "tokenizer.json"))
    config = tokenizer_config(tk, model_max_length)
    (folder / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """Load ``tokenizer.json`` from ``folder`` with the ``tokenizers`` library."""
    return Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))


def main() -> None:
    from qwen.corpus import read_corpus

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="data/corpus", help="folder written by qwen.corpus")
    parser.add_argument("--out", required=True, help="output folder for the tokenizer files")
    parser.add_argument("--vocab-size", type=int, default=8192, help="total ids, specials included")
    parser.add_argument("--max-length", type=int, default=2048, help="model_max_length to record")
    args = parser.parse_args()
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
