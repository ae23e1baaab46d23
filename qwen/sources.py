"""The three text sources of the demo corpus, read from files that Debian packages install.

    apt-get install -y python3.11-doc fortunes-zh bible-kjv-text bible-kjv

Each reader returns `Doc`s (text, source name, group for the train/held-out split): the Python
documentation's reST sources cut into sections, classical Chinese poems, KJV chapters, and a share of
chat-formatted documents derived from them. Licences are listed in qwen/corpus.py.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path
APT_COMMAND = "apt-get install -y python3.11-doc fortunes-zh bible-kjv-text bible-kjv"
PYDOC_ROOT = Path("/usr/share/doc/python3.11/html/_sources")
FORTUNES_DIR = Path("/usr/share/games/fortunes")
BIBLE_DATA = Path("/usr/lib/bible.data")


# Python doc folders / top-level files that are used (release notes, the
# deprecated distutils manual, licence texts and tables of contents are not).
PYDOC_PARTS = (
    "tutorial", "library", "reference", "howto", "faq", "c-api",
    "extending", "using", "installing", "glossary.rst.txt",
)
MAX_TABLE_LINES = 25      # grid tables longer than this are dropped
MIN_CHUNK_CHARS = 1500    # consecutive small sections are merged up to this

# The KJV books used: narrative, poetry and wisdom, gospels, a few letters.
KJV_BOOKS = (
    "Genesis", "Exodus", "Ruth", "Esther", "Job", "Psalms", "Proverbs",
    "Ecclesiastes", "Song of Solomon", "Jonah", "Matthew", "Mark", "Luke",
    "John", "Acts", "Romans", "1 Corinthians", "James", "Revelation",
)

# Entries of the fortunes-zh "chinese" file that mention any of these are
# modern (copyrighted) quotations or Debian documentation, and are skipped.
MODERN_MARKERS = (
    "赫拉利", "钱钟书", "鲁迅", "央视", "吴军", "老舍", "巴金", "冰心", "李彦宏",
    "余光中", "毛泽东", "朱自清", "胡志明", "陈毅", "王健林", "显卡吧", "网吧",
    "自由软件", "钢之炼金术师", "にちじょう", "一九", "年4月", "Debian",
)

SYSTEM_PROMPT = "You are a helpful assistant."


class MissingSourceError(RuntimeError):
    """A Debian package that provides corpus text is not installed."""


@dataclass(frozen=True)
class Doc:
    """One corpus document.

    ``source`` names the corpus part (e.g. ``"python-docs-chat"``); ``group``
    is the text whose hash decides train vs held-out (a chat document uses its
    source document's text, so both land on the same side).
    """

    source: str
    text: str
    group: str


# ---------------------------------------------------------------------------
# hashing, chat rendering


def stable_hash(text: str) -> int:
    """A seed-free 64-bit hash of ``text`` (first 8 bytes of its SHA-256)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def pick(options: tuple, key: str):
    """Choose one of ``options`` deterministically from ``key``."""
    return options[stable_hash("pick:" + key) % len(options)]


def render_chat(messages: list[dict]) -> str:
    """Render a finished conversation as the chat template does.

    The final assistant turn gets an empty think block, like a non-thinking
    reply of Qwen3; earlier turns are plain.  Mirrors ``qwen.bpe.CHAT_TEMPLATE``.

    >>> render_chat([{"role": "user", "content": "Hi"},
    ...              {"role": "assistant", "content": "Hello!"}])
    '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\nHello!<|im_end|>\\n'
    """
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    out = []
    for i, m in enumerate(messages):
        content = m["content"]
        if m["role"] == "assistant" and i > last_user:
            content = "<think>\n\n</think>\n\n" + content.lstrip("\n")
        out.append(f"<|im_start|>{m['role']}\n{content}<|im_end|>\n")
    return "".join(out)


def chat_doc(source: str, group: str, question: str, answer: str) -> Doc:
    """A one-turn chat document; one in four also carries a system prompt."""
    messages = [{"role": "user", "content": question},
                {"role": "assistant", "content": answer}]
    if stable_hash("system:" + question) % 4 == 0:
        messages.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
    return Doc(source, render_chat(messages), group)


# ---------------------------------------------------------------------------
# Python documentation (reST sources)


HEADING_UNDERLINE = re.compile(r"""^([=\-~^"'`#*+:.<>_])\1{2,}\s*$""")
GRID_TABLE_LINE = re.compile(r"^\s*[+|]")


def pydoc_files(root: Path = PYDOC_ROOT) -> list[Path]:
    """The ``.rst.txt`` files of the parts in ``PYDOC_PARTS``, sorted."""
    files = []
    for part in PYDOC_PARTS:
        path = root / part
        files += sorted(path.rglob("*.rst.txt")) if path.is_dir() else [path]
    return [f for f in files if f.is_file()]


def drop_noise(lines: list[str]) -> list[str]:
    """Remove reST noise: ``.. index::`` blocks, link targets, author lines
    and grid tables longer than ``MAX_TABLE_LINES`` lines."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(".. index::"):
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i][:1] == " "):
                i += 1
            continue
        if re.match(r"^\.\. (_[^:]+:|moduleauthor::|sectionauthor::)", line):
            i += 1
            continue
        if GRID_TABLE_LINE.match(line) and line.strip().startswith("+-"):
            j = i
            while j < len(lines) and GRID_TABLE_LINE.match(lines[j]):
                j += 1
            if j - i > MAX_TABLE_LINES:
                i = j
                continue
            out += lines[i:j]
            i = j
            continue
        out.append(line)
        i += 1
    return out


def is_heading(lines: list[str], i: int) -> bool:
    """True when ``lines[i]`` is a section title (text over an underline)."""
    if i + 1 >= len(lines):
        return False
    title, under = lines[i], lines[i + 1]
    return (bool(title.strip()) and not title[0].isspace()
            and not HEADING_UNDERLINE.match(title)
            and bool(HEADING_UNDERLINE.match(under))
            and len(under.rstrip()) >= len(title.rstrip()))


def split_sections(text: str) -> list[tuple[str, str]]:
    """Split a reST file into ``(title, section_text)`` pairs.

    The section text starts with its heading lines (an overline is kept);
    text before the first heading gets the title ``""``.

    >>> split_sections("A\\n===\\n\\nfoo\\n\\nB\\n---\\nbar\\n")
    [('A', 'A\\n===\\n\\nfoo\\n'), ('B', 'B\\n---\\nbar\\n')]
    """
    lines = drop_noise(text.split("\n"))
    starts = [i for i in range(len(lines)) if is_heading(lines, i)]
    starts = [i - 1 if i > 0 and HEADING_UNDERLINE.match(lines[i - 1]) else i
              for i in starts]
    bounds = [0] + starts + [len(lines)]
    sections = []
    for a, b in zip(bounds, bounds[1:]):
        body = "\n".join(lines[a:b]).strip("\n")
        if not body:
            continue
        title_line = lines[a + 1] if HEADING_UNDERLINE.match(lines[a]) and a + 1 < b else lines[a]
        title = title_line.strip() if a in starts else ""
        sections.append((title, body + "\n"))
    return sections


def merge_small(sections: list[tuple[str, str]], min_chars: int = MIN_CHUNK_CHARS) -> list[list[tuple[str, str]]]:
    """Group consecutive sections so each group has at least ``min_chars``
    characters (the last group of a file may be shorter)."""
    groups, current, size = [], [], 0
    for section in sections:
        current.append(section)
        size += len(section[1])
        if size >= min_chars:
            groups.append(current)
            current, size = [], 0
    if current:
        if groups and size < min_chars // 3:
            groups[-1] += current
        else:
            groups.append(current)
    return groups


def plain_inline(text: str) -> str:
    """Turn reST inline markup into Markdown-ish plain text.

    >>> plain_inline("Use :func:`~json.dumps` or ``repr`` (:pep:`8`), see `docs <https://x>`_.")
    'Use `dumps` or `repr` (PEP 8), see docs.'
    """
    def role(m: re.Match) -> str:
        name, body = m.group(1), m.group(2)
        shown = re.sub(r"\s*<[^>]*>$", "", body) if body.endswith(">") else body
        shown = shown.lstrip("!")
        if shown.startswith("~"):
            shown = shown[1:].rsplit(".", 1)[-1]
        if name in ("pep", "rfc"):
            return f"{name.upper()} {shown}"
        if name in ("ref", "doc", "term", "dfn", "emphasis", "title-reference", "abbr", "source"):
            return shown
        return f"`{shown}`"

    text = re.sub(r":(?:[a-z]+:)?([a-z-]+):`([^`]+)`", role, text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    text = re.sub(r"`([^`<]+?)\s*<[^>]+>`__?", r"\1", text)
    text = re.sub(r"`([^`]+)`__?", r"\1", text)
    text = re.sub(r"\s*\[#[^\]]*\]_", "", text)
    return text.replace("\\ ", "").replace(" --- ", ": ")


def is_prose(block: list[str]) -> bool:
    """True for an ordinary paragraph (not a directive, table, list or code)."""
    first = block[0]
    return not (first[:1].isspace() or first.startswith((".. ", "+", "|", "=", ":", "-", "*", "#"))
                or first.startswith("**Source code:**") or re.match(r"^\d+\.\s|^#\.\s", first))


def blocks_of(body: str) -> list[list[str]]:
    """Split text into blank-line separated blocks of lines."""
    blocks, current = [], []
    for line in body.split("\n"):
        if line.strip():
            current.append(line.rstrip())
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def strip_heading(section_text: str) -> str:
    """``section_text`` without its leading heading (and overline) lines."""
    lines = section_text.split("\n")
    if lines and HEADING_UNDERLINE.match(lines[0]):
        lines = lines[1:]
    return "\n".join(lines[2:] if is_heading(lines, 0) else lines)


def first_paragraphs(section_text: str, max_paragraphs: int = 2, max_chars: int = 900) -> str:
    """The opening prose of a section as a chat answer, or ``""``.

    Leading directives are skipped; paragraphs are unwrapped and inline
    markup simplified; a paragraph ending in ``::`` keeps its literal block
    as a fenced code block, and ends the answer.

    >>> first_paragraphs("Title\\n=====\\n\\n.. module:: m\\n\\nSay\\n:func:`hi`::\\n\\n   hi()\\n")
    'Say `hi`:\\n\\n```\\nhi()\\n```'
    """
    blocks = blocks_of(strip_heading(section_text))
    while blocks and not is_prose(blocks[0]):
        blocks.pop(0)
    parts: list[str] = []
    for i, block in enumerate(blocks):
        if not is_prose(block) or len(parts) >= max_paragraphs:
            break
        para = plain_inline(" ".join(line.strip() for line in block))
        if para.endswith("::"):
            j = i + 1
            while j < len(blocks) and blocks[j][0][:1].isspace():
                j += 1
            if j == i + 1:
                break
            code = textwrap.dedent("\n\n".join("\n".join(b) for b in blocks[i + 1:j]))
            parts.append(para[:-3] + "." if para.endswith(" ::") else para[:-1])
            parts.append("```\n" + code + "\n```")
            break
        parts.append(para)
        if sum(map(len, parts)) >= max_chars:
            break
    return "\n\n".join(parts)


PYDOC_QUESTIONS = (
    "Explain {t}.", "What is {t}?", "Tell me about {t}.",
    "Give an overview of {t}.", "Explain {t} in the Python documentation.",
)


def pydoc_chat(title: str, section_text: str, group: str) -> Doc | None:
    """A question about a doc section answered with its opening prose."""
    topic = plain_inline(title).rstrip(".:")
    answer = first_paragraphs(section_text)
    if not topic or len(answer) < 120 or stable_hash("ask:" + section_text) % 5 > 1:
        return None
    question = pick(PYDOC_QUESTIONS, section_text).format(t=topic)
    return chat_doc("python-docs-chat", group, question, answer)


def python_doc_docs(root: Path = PYDOC_ROOT) -> list[Doc]:
    """Plain documents (merged sections) and chat documents (~40 % of the
    sections that open with enough prose) from the Python docs."""
    docs = []
    for path in pydoc_files(root):
        sections = split_sections(path.read_text(encoding="utf-8"))
        for group in merge_small(sections):
            text = "\n".join(body for _, body in group)
            docs.append(Doc("python-docs", text, text))
            for title, body in group:
                chat = pydoc_chat(title, body, text)
                if chat:
                    docs.append(chat)
    return docs


# ---------------------------------------------------------------------------
# Chinese poetry (fortunes-zh)


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def fortune_entries(path: Path) -> list[str]:
    """Entries of a fortune file: ANSI colours removed, split at ``%`` lines,
    lines stripped of surrounding blanks, runs of blank lines collapsed."""
    text = ANSI_ESCAPE.sub("", path.read_text(encoding="utf-8"))
    entries = []
    for raw in re.split(r"^%\n", text, flags=re.M):
        lines = [line.strip() for line in raw.split("\n")]
        entry = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
        if entry:
            entries.append(entry)
    return entries


@dataclass(frozen=True)
class Poem:
    """A poem with a header: ``title`` is e.g. ``"《春居杂兴》二首"``."""

    title: str
    author: str
    body: str

    def text(self) -> str:
        return f"{self.title}\n作者：{self.author}\n\n{self.body}"


def parse_poem(entry: str) -> Poem | None:
    """Parse a ``tang300`` / ``song100`` entry (title line, author line, body).

    >>> parse_poem("题目:《塞上》\\n作者:柳开（９４６－９９９）\\n鸣骹直上一千尺。").author
    '柳开'
    """
    lines = entry.split("\n")
    if len(lines) < 3:
        return None
    title = re.match(r"^(?:题目[:：])?(《.+?》.*)$", lines[0])
    author = re.match(r"^作者[:：]\s*(.+?)\s*(?:（.*）)?$", lines[1])
    if not (title and author):
        return None
    body = "\n".join(lines[2:]).strip()
    return Poem(title.group(1).strip(), author.group(1), body) if body else None


def quote_parts(entry: str) -> tuple[str, str]:
    """Split a ``chinese`` fortune into ``(body, attribution)``; the
    attribution is the text after a final ``--`` line, or ``""``."""
    m = re.search(r"\n--\s*(.+)$", entry)
    if not m:
        return entry, ""
    return entry[:m.start()].strip(), m.group(1).strip()


def is_classical(entry: str) -> bool:
    """Keep entries without Latin letters and without modern markers."""
    return not re.search(r"[A-Za-z]", entry) and not any(k in entry for k in MODERN_MARKERS)


POEM_QUESTIONS = ("写一首诗。", "请背诵{a}的{t}。", "{t}的全文是什么？", "{t}", "默写{t}。")


def poem_docs(path: Path, kind: str) -> list[Doc]:
    """Poems of ``tang300`` / ``song100`` as plain documents, and as chat
    documents (a request for the poem, answered with it)."""
    docs = []
    for entry in fortune_entries(path):
        poem = parse_poem(entry)
        if poem is None:
            continue
        text = poem.text()
        docs.append(Doc("zh-poetry", text, text))
        question = pick(POEM_QUESTIONS, kind + text).format(a=poem.author, t=poem.title)
        docs.append(chat_doc("zh-poetry-chat", text, question, text))
    return docs


def quote_docs(path: Path) -> list[Doc]:
    """Classical entries of the mixed ``chinese`` fortune file; half of the
    ones attributed to a work (``作者《题目》``, proverbs excepted) also
    become a chat request to quote them."""
    docs = []
    for entry in fortune_entries(path):
        if not is_classical(entry):
            continue
        body, source = quote_parts(entry)
        text = f"{body}\n——{source}" if source else body
        docs.append(Doc("zh-poetry", text, text))
        if "《" in source and "谚语" not in source and stable_hash("ask:" + text) % 2 == 0:
            question = pick(("引用{s}中的一段。", "请背诵{s}中的名句。"), text).format(s=source)
            docs.append(chat_doc("zh-poetry-chat", text, question, body))
    return docs


def chinese_poetry_docs(folder: Path = FORTUNES_DIR) -> list[Doc]:
    """All Chinese documents: Tang poems, Song lyrics, classical quotations."""
    return (poem_docs(folder / "tang300", "tang300") + poem_docs(folder / "song100", "song100")
            + quote_docs(folder / "chinese"))


# ---------------------------------------------------------------------------
# King James Version (bible-kjv-text, read through the `bible` program)


def kjv_text() -> str:
    """The full KJV as printed by ``bible -l0`` (one verse per line)."""
    cmd = [shutil.which("bible") or "bible", "-l0", "Genesis1:1-Revelation22:21"]
    result = subprocess.run(cmd, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
    return result.stdout


def kjv_chapters(text: str) -> list[tuple[str, int, list[str]]]:
    """Parse ``bible -l0`` output into ``(book, chapter, verses)``.

    >>> kjv_chapters("\\nJonah 1\\n\\n  1 Now the word...\\n  2 Arise, go...\\n")
    [('Jonah', 1, ['Now the word...', 'Arise, go...'])]
    """
    chapters: list[tuple[str, int, list[str]]] = []
    for line in text.split("\n"):
        head = re.match(r"^(\S.*) (\d+)$", line)
        verse = re.match(r"^\s+\d+ (.*)$", line)
        if head:
            chapters.append((head.group(1), int(head.group(2)), []))
        elif verse and chapters:
            chapters[-1][2].append(verse.group(1).strip())
    return chapters


def kjv_docs(books: tuple[str, ...] = KJV_BOOKS) -> list[Doc]:
    """One document per chapter of the selected books, plus, for one chapter
    in four, a chat request to recite its opening verses."""
    docs = []
    for book, number, verses in kjv_chapters(kjv_text()):
        if book not in books or not verses:
            continue
        text = f"{book} {number}\n\n" + "\n".join(f"{i} {v}" for i, v in enumerate(verses, 1)) + "\n"
        docs.append(Doc("kjv", text, text))
        if stable_hash("recite:" + text) % 4 == 0:
            n = min(len(verses), 3 + stable_hash("n:" + text) % 4)
            question = f"Recite {book} {number}:1-{n} (KJV)."
            answer = " ".join(verses[:n])
            docs.append(chat_doc("kjv-chat", text, question, answer))
    return docs


# ---------------------------------------------------------------------------
