"""The tokenizer pipeline: BPE merges on a hand-worked string, Qwen's pre-tokenisation, exact round trips, the
special tokens, transformers agreeing with `tokenizers`, and the embedded checkpoint's files reproduced."""
import json
import os

import pytest
import regex
from tokenizers import Tokenizer, decoders

from qwen.chat import QWEN_TEMPLATE
from qwen.train.bpe import (QWEN_SPLIT_PATTERN, SPECIAL_TOKENS, between_special_tokens, new_tokenizer,
                            save_tokenizer, tokenizer_config, train_tokenizer)

ASSETS = os.path.join(os.path.dirname(__file__), "..", "assets")
TEXTS = ["Hello, world!", "用一句话介绍一下 Transformer。", "emoji 🤖, tabs\t\tand\r\nCRLF  ", "   leading spaces",
         "NFD e\u0301 is not NFC \u00e9", "<|im_start|>user\nHi<|im_end|>\n", "def f(x):\n    return x ** 2\n"]
CORPUS = ["The quick brown fox jumps over the lazy dog. " * 3, "床前明月光，疑是地上霜。举头望明月，低头思故乡。" * 2,
          "def add(a, b):\n    return a + b\n" * 3, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>"]


def merges_of(tk):
    merges = json.loads(tk.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def test_merges_on_the_hand_worked_string_aaabdaaabac():
    """Wikipedia's example: aaabdaaabac -> ZabdZabac (Z=aa) -> ZYdZYac (Y=ab) -> XdXac (X=ZY); then every pair
    occurs once, and no more merges are learnt."""
    tk = train_tokenizer(["aaabdaaabac"], vocab_size=256 + 3 + len(SPECIAL_TOKENS))
    assert merges_of(tk) == [("a", "a"), ("a", "b"), ("aa", "ab")]
    assert tk.encode("aaabdaaabac").tokens == ["aaab", "d", "aaab", "a", "c"]
    with pytest.raises(ValueError, match="corpus too small: learned 259 of 260"):
        train_tokenizer(["aaabdaaabac"], vocab_size=256 + 4 + len(SPECIAL_TOKENS))


def test_pre_tokenisation_is_qwens_regex_split():
    split = new_tokenizer().pre_tokenizer
    pieces = lambda text: [decoders.ByteLevel().decode([p]) for p, _ in split.pre_tokenize_str(text)]
    assert pieces("Hello world, 2024年!\n\n") == ["Hello", " world", ",", " ", "2", "0", "2", "4", "年", "!\n\n"]
    for text in TEXTS:
        assert pieces(text) == regex.findall(QWEN_SPLIT_PATTERN, text), text


def test_special_token_strings_are_cut_out_of_the_training_text():
    assert list(between_special_tokens(["<|im_start|>user\nHi<|im_end|>\n", "<think></think>"])) == ["user\nHi", "\n"]


@pytest.fixture(scope="module")
def trained():
    return train_tokenizer(CORPUS, vocab_size=320)


def test_a_trained_tokenizer_has_the_documented_layout(trained):
    assert trained.get_vocab_size() == 320
    assert [trained.id_to_token(i) for i in range(315, 320)] == list(SPECIAL_TOKENS)
    assert not any("<|" in token for token, i in trained.get_vocab().items() if 256 <= i < 315)
    assert trained.encode("<|im_start|>user<think>").ids == [316, *trained.encode("user").ids, 318]


@pytest.mark.parametrize("text", TEXTS)
def test_any_text_round_trips_exactly(trained, text):
    assert trained.decode(trained.encode(text).ids, skip_special_tokens=False) == text


def test_transformers_loads_the_saved_tokenizer_and_agrees(trained, tmp_path):
    from transformers import AutoTokenizer
    save_tokenizer(trained, tmp_path, model_max_length=512)
    ref = AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS:                                              # NFD text included: no normaliser added
        assert ref.encode(text, add_special_tokens=False) == trained.encode(text).ids, text
    assert ref.eos_token == "<|im_end|>" and ref.pad_token == "<|endoftext|>" and ref.model_max_length == 512
    assert ref.chat_template == QWEN_TEMPLATE


def test_the_embedded_checkpoints_tokenizer_files_are_what_bpe_writes():
    tk = Tokenizer.from_file(os.path.join(ASSETS, "tokenizer.json"))
    with open(os.path.join(ASSETS, "tokenizer_config.json"), encoding="utf-8") as f:
        shipped = json.load(f)
    assert tokenizer_config(tk, 2048) == shipped                    # the chat template is the engine's, verbatim
    assert tk.get_vocab_size() == 8192
    assert [tk.id_to_token(i) for i in range(8187, 8192)] == list(SPECIAL_TOKENS)
