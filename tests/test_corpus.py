"""The corpus on small in-memory documents: deduplication, the seed-free train / held-out split, the order, the
files (written and read back exactly), and the error that names the missing Debian packages."""
import random

import pytest

from qwen.train import corpus, sources
from qwen.train.sources import Doc, MissingSourceError


def docs_of(*texts, source="python-docs"):
    return [Doc(source, t, t) for t in texts]


def test_dedupe_keeps_the_first_of_each_text_and_drops_empty_and_separator_documents():
    docs = [Doc("a", "x", "1"), Doc("b", "x", "2"), Doc("a", " \n", "3"), Doc("a", "y<|endoftext|>", "4"),
            Doc("a", "y", "5")]
    assert corpus.dedupe(docs) == [Doc("a", "x", "1"), Doc("a", "y", "5")]


def test_about_two_percent_of_groups_are_held_out():
    held = sum(corpus.is_heldout(Doc("s", "", f"group {i}")) for i in range(20000))
    assert 300 < held < 500                                         # binomial(20000, 0.02): 400 +- 20


def test_a_chat_document_lands_on_the_side_of_its_source():
    texts = [f"Chapter {i}" for i in range(2000)]
    docs = docs_of(*texts) + [Doc("kjv-chat", f"Recite chapter {i}", t) for i, t in enumerate(texts)]
    built = corpus.assemble(docs)
    for i, t in enumerate(texts):
        side = "heldout" if t in built["heldout"] else "train"
        assert f"Recite chapter {i}" in built[side]
    assert built["heldout"]                                         # some groups are held out at all


def test_assemble_splits_counts_and_orders_the_same_whatever_the_input_order():
    docs = docs_of(*(f"doc {i}" for i in range(300))) + docs_of("诗一首", "诗一首", source="zh-poetry")
    built = corpus.assemble(docs)
    shuffled = docs[:]
    random.Random(0).shuffle(shuffled)
    assert corpus.assemble(shuffled) == built
    assert sorted(built["train"] + built["heldout"]) == sorted({d.text for d in docs})
    assert not set(built["train"]) & set(built["heldout"])
    assert built["sources"] == {"python-docs": (300, sum(len(f"doc {i}") for i in range(300))), "zh-poetry": (1, 3)}
    assert built["train"] != sorted(built["train"])                 # hash order, not input or text order


def test_documents_are_written_and_read_back_exactly(tmp_path):
    docs = ["plain", "", "two\nlines\n", "windows\r\nline ends\r", "中文，诗。", "ends with a separator-like <|im_end|>"]
    corpus.write_docs(tmp_path / "d.txt", docs)
    assert (tmp_path / "d.txt").read_bytes().count(b"<|endoftext|>\n") == len(docs)
    assert corpus.read_docs(tmp_path / "d.txt") == docs
    corpus.write_corpus({"train": docs[:2], "heldout": docs[2:]}, tmp_path / "c")
    assert corpus.read_corpus(tmp_path / "c") == (docs[:2], docs[2:])


def test_a_truncated_file_is_an_error(tmp_path):
    (tmp_path / "d.txt").write_text("one<|endoftext|>\ntwo", encoding="utf-8")
    with pytest.raises(ValueError, match="does not end with the document separator"):
        corpus.read_docs(tmp_path / "d.txt")


def test_missing_sources_name_the_apt_get_command(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "PYDOC_ROOT", tmp_path / "no-python-docs")
    with pytest.raises(MissingSourceError, match="no-python-docs") as e:
        corpus.build_corpus()
    assert sources.APT_COMMAND in str(e.value)


def test_the_command_writes_both_files_and_a_summary(tmp_path, monkeypatch, capsys):
    built = corpus.assemble(docs_of(*(f"doc {i}" for i in range(100))))
    monkeypatch.setattr(corpus, "build_corpus", lambda: built)
    corpus.main(["--out", str(tmp_path)])
    assert corpus.read_corpus(tmp_path) == (built["train"], built["heldout"])
    out = capsys.readouterr().out
    assert "python-docs" in out and f"train{len(built['train']):>21}" in out
