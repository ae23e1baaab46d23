"""The corpus readers on hand-worked inputs, no Debian package needed: reST sections and markup, fortune files and
poems, `bible` output, and chat documents, which must be the checkpoint's own template as transformers renders it."""
import hashlib
import os

import pytest

from qwen.train import kjv, poetry, pydocs
from qwen.train.sources import SYSTEM_PROMPT, chat_doc, choose, stable_hash

ASSETS = os.path.join(os.path.dirname(__file__), "..", "assets")


def test_stable_hash_is_the_first_eight_bytes_of_sha256():
    assert stable_hash("") == 0xE3B0C44298FC1C14            # SHA-256("") = e3b0c442 98fc1c14 9afbf4c8 ...
    assert stable_hash("abc") == 0xBA7816BF8F01CFEA         # SHA-256("abc") = ba7816bf 8f01cfea ... (FIPS 180-2)
    assert stable_hash("诗") == int(hashlib.sha256("诗".encode()).hexdigest()[:16], 16)


def test_choose_depends_only_on_the_key():
    options = tuple(range(100))
    assert choose(options, "a") == choose(options, "a")
    assert len({choose(options, str(i)) for i in range(50)}) > 20


def test_chat_document_text_is_hand_worked_chatml_with_an_empty_think_block():
    doc = chat_doc("kjv-chat", "g", "Hi", "Hello!")                  # "Hi" draws no system prompt
    assert doc.text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n"
    assert (doc.source, doc.group) == ("kjv-chat", "g")


def test_chat_documents_equal_the_checkpoints_template_rendered_by_transformers():
    from transformers import AutoTokenizer
    ref = AutoTokenizer.from_pretrained(ASSETS)
    kinds = set()
    for i in range(12):
        question, answer = f"Explain topic {i}.", f"\nIt is 主题 number {i}.\n\nSee `x`."
        doc = chat_doc("python-docs-chat", "g", question, answer)
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        if doc.text.startswith("<|im_start|>system"):
            messages.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
        kinds.add(len(messages))
        assert doc.text == ref.apply_chat_template(messages, tokenize=False)
    assert kinds == {2, 3}                                   # some with a system prompt (one in four), some without


# --- the Python docs (reST) ---

def test_split_sections_at_headings_keeps_overlines_and_a_preamble():
    assert pydocs.split_sections("A\n===\n\nfoo\n\nB\n---\nbar\n") == [("A", "A\n===\n\nfoo\n"), ("B", "B\n---\nbar\n")]
    text = "intro\n\n=====\nTitle\n=====\n\nbody\n"
    assert pydocs.split_sections(text) == [("", "intro\n"), ("Title", "=====\nTitle\n=====\n\nbody\n")]
    assert pydocs.split_sections("Long title\n===\n\nnot a heading: the underline is short\n")[0][0] == ""


def test_drop_noise_removes_index_blocks_targets_and_long_tables():
    lines = [".. index::", "   single: json", "", ".. _json-target:", ".. moduleauthor:: Bob", "Text."]
    assert pydocs.drop_noise(lines) == ["Text."]
    short = ["+---+", "| a |", "+---+"]
    long = ["+---+"] + ["| a |"] * pydocs.MAX_TABLE_LINES
    assert pydocs.drop_noise(short + ["x"]) == short + ["x"]
    assert pydocs.drop_noise(long + ["x"]) == ["x"]


def test_plain_inline_turns_rest_roles_and_links_into_plain_text():
    assert pydocs.plain_inline("Use :func:`~json.dumps` or ``repr`` (:pep:`8`), see `docs <https://x>`_.") == \
        "Use `dumps` or `repr` (PEP 8), see docs."
    assert pydocs.plain_inline(":ref:`the tutorial <tut>` and :py:class:`dict` --- done") == \
        "the tutorial and `dict`: done"


def test_first_paragraphs_skips_directives_and_keeps_a_literal_block_as_code():
    section = "Title\n=====\n\n.. module:: m\n\nSay\n:func:`hi`::\n\n   hi()\n"
    assert pydocs.first_paragraphs(section) == "Say `hi`:\n\n```\nhi()\n```"
    assert pydocs.first_paragraphs("T\n===\n\nOne.\n\nTwo ::\n\n   code\n") == "One.\n\nTwo.\n\n```\ncode\n```"
    assert pydocs.first_paragraphs("T\n===\n\nA\nB\n\nC\n\nD\n") == "A B\n\nC"          # two paragraphs, unwrapped


def test_small_sections_merge_into_groups_of_at_least_min_chars():
    sections = [(str(i), "x" * n) for i, n in enumerate([4, 4, 4, 20, 2])]
    groups = pydocs.merge_small_sections(sections, min_chars=10)
    assert [[t for t, _ in g] for g in groups] == [["0", "1", "2"], ["3", "4"]]      # 2 < 10 // 3: joins the last
    sections[-1] = ("4", "x" * 5)
    groups = pydocs.merge_small_sections(sections, min_chars=10)
    assert [[t for t, _ in g] for g in groups] == [["0", "1", "2"], ["3"], ["4"]]


def test_python_doc_docs_reads_the_parts_and_chat_documents_share_their_source_group(tmp_path):
    (tmp_path / "library").mkdir()
    (tmp_path / "whatsnew").mkdir()                                                   # not a part: not read
    prose = " ".join(["The json module encodes and decodes JSON text."] * 4)
    text = "".join(f"Section {i}\n==========\n\n{prose}\n\n" for i in range(40))
    (tmp_path / "library" / "json.rst.txt").write_text(text, encoding="utf-8")
    (tmp_path / "whatsnew" / "3.11.rst.txt").write_text(text, encoding="utf-8")
    docs = pydocs.python_doc_docs(tmp_path)
    plain = [d for d in docs if d.source == "python-docs"]
    chats = [d for d in docs if d.source == "python-docs-chat"]
    assert "".join(d.text for d in plain).count("Section ") == 40                    # every section, once
    assert all(len(d.text) >= pydocs.MIN_CHUNK_CHARS for d in plain[:-1])
    assert 0 < len(chats) < 40                                                        # about two in five
    assert all(c.group in {d.text for d in plain} for c in chats)
    assert all(c.text.startswith(("<|im_start|>user\n", "<|im_start|>system\n")) for c in chats)


# --- Chinese poetry (fortunes-zh) ---

def test_fortune_entries_split_at_percent_lines_without_colours_or_padding(tmp_path):
    path = tmp_path / "f"
    path.write_text("\x1b[1;31m  床前明月光 \x1b[0m\n疑是地上霜\n%\n\n\n\n%\n  a\n\n\n\nb  \n%\n", encoding="utf-8")
    assert poetry.fortune_entries(path) == ["床前明月光\n疑是地上霜", "a\n\nb"]


def test_parse_poem_reads_title_author_and_body():
    poem = poetry.parse_poem("题目:《塞上》\n作者:柳开（９４６－９９９）\n鸣骹直上一千尺。")
    assert poem == poetry.Poem("《塞上》", "柳开", "鸣骹直上一千尺。")
    assert poem.text() == "《塞上》\n作者：柳开\n\n鸣骹直上一千尺。"
    assert poetry.parse_poem("《春居杂兴》二首\n作者：王禹偁\n两株桃杏映篱斜").title == "《春居杂兴》二首"
    assert poetry.parse_poem("学而时习之\n不亦说乎\n有朋自远方来") is None


def test_quotations_keep_classical_entries_with_their_attribution():
    assert poetry.split_attribution("学而时习之\n-- 孔子《论语》") == ("学而时习之", "孔子《论语》")
    assert poetry.split_attribution("无名句") == ("无名句", "")
    assert poetry.is_classical("床前明月光")
    assert not poetry.is_classical("Debian 是自由软件")
    assert not poetry.is_classical("横眉冷对千夫指\n-- 鲁迅")


def test_poem_docs_pair_each_poem_with_a_chat_request_for_it(tmp_path):
    path = tmp_path / "tang300"
    path.write_text("题目:《塞上》\n作者:柳开\n鸣骹直上一千尺。\n%\n不是诗\n%\n", encoding="utf-8")
    plain, chat = poetry.poem_docs(path, "tang300")
    assert plain.text == "《塞上》\n作者：柳开\n\n鸣骹直上一千尺。" and plain.source == "zh-poetry"
    assert chat.source == "zh-poetry-chat" and chat.group == plain.text
    assert chat.text.endswith(f"<think>\n\n</think>\n\n{plain.text}<|im_end|>\n")


# --- the King James Bible ---

BIBLE_OUTPUT = "\nJonah 1\n\n  1 Now the word...\n  2 Arise, go...\n\nObadiah 1\n\n  1 The vision...\n"


def test_kjv_chapters_parse_bible_output():
    assert kjv.kjv_chapters(BIBLE_OUTPUT) == [("Jonah", 1, ["Now the word...", "Arise, go..."]),
                                              ("Obadiah", 1, ["The vision..."])]


def test_kjv_docs_number_the_verses_of_the_chosen_books_only():
    docs = kjv.kjv_docs(text=BIBLE_OUTPUT)
    assert docs[0].text == "Jonah 1\n\n1 Now the word...\n2 Arise, go...\n" and docs[0].source == "kjv"
    assert all("Obadiah" not in d.text for d in docs)                                 # not in KJV_BOOKS
    assert {d.source for d in docs[1:]} <= {"kjv-chat"}
