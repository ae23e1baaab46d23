"""The Python 3.11 documentation's reST sources (Debian's python3.11-doc) as corpus documents.

Each file is cut into sections at its headings, and consecutive small sections are merged into documents of at
least MIN_CHUNK_CHARS characters. About 40% of the sections that open with enough prose also become a chat
document: a question about the section's title, answered with its opening paragraphs in plain text.

    Decoding JSON                        "Explain Decoding JSON."
    =============                  ->
                                         Use `loads` to read ... (the first paragraphs, markup simplified)
    Use :func:`loads` to read ...
"""
import re
import textwrap

from qwen.train.sources import PYDOC_ROOT, Doc, chat_doc, choose, stable_hash

# Doc folders and top-level files used (release notes, the deprecated distutils manual, licence texts and tables of
# contents are not).
PYDOC_PARTS = ("tutorial", "library", "reference", "howto", "faq", "c-api", "extending", "using", "installing",
               "glossary.rst.txt")
MAX_TABLE_LINES = 25      # grid tables longer than this are dropped
MIN_CHUNK_CHARS = 1500    # consecutive small sections are merged up to this
QUESTIONS = ("Explain {t}.", "What is {t}?", "Tell me about {t}.", "Give an overview of {t}.",
             "Explain {t} in the Python documentation.")

HEADING_UNDERLINE = re.compile(r"""^([=\-~^"'`#*+:.<>_])\1{2,}\s*$""")
GRID_TABLE_LINE = re.compile(r"^\s*[+|]")


def pydoc_files(root=PYDOC_ROOT):
    """The .rst.txt files of PYDOC_PARTS under `root`, sorted."""
    files = []
    for part in PYDOC_PARTS:
        path = root / part
        files += sorted(path.rglob("*.rst.txt")) if path.is_dir() else [path]
    return [f for f in files if f.is_file()]


def drop_noise(lines):
    """The lines without reST noise: `.. index::` blocks, link targets, author lines, grid tables longer than
    MAX_TABLE_LINES lines."""
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
            end = i
            while end < len(lines) and GRID_TABLE_LINE.match(lines[end]):
                end += 1
            if end - i <= MAX_TABLE_LINES:
                out += lines[i:end]
            i = end
            continue
        out.append(line)
        i += 1
    return out


def is_heading(lines, i):
    """Whether lines[i] is a section title: text over an underline at least as long."""
    if i + 1 >= len(lines):
        return False
    title, under = lines[i], lines[i + 1]
    return (bool(title.strip()) and not title[0].isspace() and not HEADING_UNDERLINE.match(title)
            and bool(HEADING_UNDERLINE.match(under)) and len(under.rstrip()) >= len(title.rstrip()))


def split_sections(text):
    """A reST file as [(title, section text)]. The section text starts with its heading lines (an overline kept);
    text before the first heading gets the title "".
        "A\\n===\\n\\nfoo\\n\\nB\\n---\\nbar\\n" -> [("A", "A\\n===\\n\\nfoo\\n"), ("B", "B\\n---\\nbar\\n")]"""
    lines = drop_noise(text.split("\n"))
    starts = [i for i in range(len(lines)) if is_heading(lines, i)]
    starts = [i - 1 if i > 0 and HEADING_UNDERLINE.match(lines[i - 1]) else i for i in starts]    # the overline
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


def merge_small_sections(sections, min_chars=MIN_CHUNK_CHARS):
    """Consecutive sections grouped so that each group holds at least `min_chars` characters. A short remainder
    (under a third of that) joins the group before it; a longer one stays a group of its own."""
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


def plain_inline(text):
    """reST inline markup as Markdown-ish plain text.
        "Use :func:`~json.dumps` or ``repr`` (:pep:`8`), see `docs <https://x>`_."
        -> "Use `dumps` or `repr` (PEP 8), see docs."
    """
    def role(m):
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

    text = re.sub(r":(?:[a-z]+:)?([a-z-]+):`([^`]+)`", role, text)      # :role:`x`, :py:role:`x`
    text = re.sub(r"``([^`]+)``", r"`\1`", text)                         # ``literal``
    text = re.sub(r"`([^`<]+?)\s*<[^>]+>`__?", r"\1", text)              # `text <link>`_
    text = re.sub(r"`([^`]+)`__?", r"\1", text)                          # `reference`_
    text = re.sub(r"\s*\[#[^\]]*\]_", "", text)                          # footnote marks
    return text.replace("\\ ", "").replace(" --- ", ": ")


def is_prose(block):
    """Whether a block is an ordinary paragraph (not a directive, table, list or code)."""
    first = block[0]
    return not (first[:1].isspace() or first.startswith((".. ", "+", "|", "=", ":", "-", "*", "#"))
                or first.startswith("**Source code:**") or re.match(r"^\d+\.\s|^#\.\s", first))


def paragraph_blocks(body):
    """The text's blank-line separated blocks, each a list of lines."""
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


def strip_heading(section_text):
    """The section's text without its heading lines (overline, title, underline)."""
    lines = section_text.split("\n")
    if lines and HEADING_UNDERLINE.match(lines[0]):
        lines = lines[1:]
    return "\n".join(lines[2:] if is_heading(lines, 0) else lines)


def first_paragraphs(section_text, max_paragraphs=2, max_chars=900):
    """The section's opening prose as a chat answer, or "". Leading directives are skipped, paragraphs unwrapped and
    their markup simplified; a paragraph ending in "::" keeps its literal block as fenced code, and ends the answer.
        "Title\\n=====\\n\\n.. module:: m\\n\\nSay\\n:func:`hi`::\\n\\n   hi()\\n" -> "Say `hi`:\\n\\n```\\nhi()\\n```"
    """
    blocks = paragraph_blocks(strip_heading(section_text))
    while blocks and not is_prose(blocks[0]):
        blocks.pop(0)
    parts = []
    for i, block in enumerate(blocks):
        if not is_prose(block) or len(parts) >= max_paragraphs:
            break
        paragraph = plain_inline(" ".join(line.strip() for line in block))
        if paragraph.endswith("::"):
            end = i + 1
            while end < len(blocks) and blocks[end][0][:1].isspace():        # the indented literal block
                end += 1
            if end == i + 1:
                break
            code = textwrap.dedent("\n\n".join("\n".join(b) for b in blocks[i + 1:end]))
            parts.append(paragraph[:-3] + "." if paragraph.endswith(" ::") else paragraph[:-1])    # reST's "::" rule
            parts.append("```\n" + code + "\n```")
            break
        parts.append(paragraph)
        if sum(map(len, parts)) >= max_chars:
            break
    return "\n\n".join(parts)


def section_question(title, section_text, group):
    """A chat Doc asking about the section and answered with its opening prose, for two sections in five that
    have a title and at least 120 characters of it; else None."""
    topic = plain_inline(title).rstrip(".:")
    answer = first_paragraphs(section_text)
    if not topic or len(answer) < 120 or stable_hash("ask:" + section_text) % 5 > 1:
        return None
    question = choose(QUESTIONS, section_text).format(t=topic)
    return chat_doc("python-docs-chat", group, question, answer)


def python_doc_docs(root=PYDOC_ROOT):
    """Plain documents (merged sections) and chat documents from the Python docs under `root`."""
    docs = []
    for path in pydoc_files(root):
        sections = split_sections(path.read_text(encoding="utf-8"))
        for group in merge_small_sections(sections):
            text = "\n".join(body for _, body in group)
            docs.append(Doc("python-docs", text, text))
            for title, body in group:
                chat = section_question(title, body, text)
                if chat:
                    docs.append(chat)
    return docs
