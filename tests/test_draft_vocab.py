"""The draft vocabulary file (FR-Spec): how qwen.train.draft_vocab writes it from a corpus, and how
MTP.from_pretrained reads it, refusing one that is not."""
import json
import os
import shutil

import pytest
from tokenizers import Tokenizer

from qwen.mtp import load_draft_vocab
from qwen.train import draft_vocab
from qwen.train.corpus import write_corpus

ASSETS = os.path.join(os.path.dirname(__file__), "..", "assets")


def checkpoint_copy(folder):
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(os.path.join(ASSETS, name), folder / name)
    return folder


def test_the_command_keeps_the_most_frequent_tokens_and_the_stop_tokens(tmp_path, capsys):
    tk = Tokenizer.from_file(os.path.join(ASSETS, "tokenizer.json"))
    word, other = tk.encode(" LORD").ids, tk.encode(" Moses").ids
    assert len(word) == 1 and len(other) == 1                   # each one token of this vocabulary
    # 30 tokens: " LORD" 20 times, " Moses" 10 times
    write_corpus({"train": [" LORD" * 10, " LORD" * 10 + " Moses" * 10], "heldout": []}, tmp_path / "corpus")
    ckpt = checkpoint_copy(tmp_path)
    draft_vocab.main(["--corpus", str(tmp_path / "corpus"), "--checkpoint", str(ckpt), "--size", "1"])
    written = json.load(open(ckpt / "draft_vocab.json"))
    stops = {tk.token_to_id("<|im_end|>"), tk.token_to_id("<|endoftext|>")}
    assert written["token_ids"] == sorted({word[0]} | stops)
    assert written["coverage"] == round(20 / 30, 4)
    assert "covering 66.7%" in capsys.readouterr().out
    assert load_draft_vocab(str(ckpt), 8192) == written["token_ids"]
    with pytest.raises(SystemExit):                              # a size the vocabulary cannot have
        draft_vocab.main(["--corpus", str(tmp_path / "corpus"), "--checkpoint", str(ckpt), "--size", "9000"])


@pytest.mark.parametrize("content, words", [
    ('{"token_ids": [1, 2, 9000]}', "below 8192"),
    ('{"token_ids": []}', "non-empty"),
    ('{"token_ids": [1, "a"]}', "below 8192"),
    ('{"ids": [1, 2]}', "not a draft vocabulary"),
    ("[1, 2", "not a draft vocabulary"),
])
def test_a_file_that_is_not_a_draft_vocabulary_is_refused_by_name(tmp_path, content, words):
    (tmp_path / "draft_vocab.json").write_text(content)
    with pytest.raises(ValueError, match=words) as e:
        load_draft_vocab(str(tmp_path), 8192)
    assert "draft_vocab.json" in str(e.value)


def test_a_checkpoint_without_one_drafts_over_every_token(tmp_path):
    assert load_draft_vocab(str(tmp_path), 8192) is None
