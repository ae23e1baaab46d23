"""Classical Chinese poetry from Debian's fortunes-zh as corpus documents.

Three fortune files (UTF-8, entries separated by "%" lines): tang300 (唐诗三百首) and song100 (宋词一百首), whose
entries are a title line, an author line and the poem, and the mixed `chinese` file of quotations, most of them
classical, some modern (copyrighted) or about Debian: those are dropped (MODERN_MARKERS), as is anything with
Latin letters. A poem becomes a plain document and a chat request for it, answered with the same text:

    题目:《塞上》                      《塞上》
    作者:柳开（９４６－９９９）  ->    作者：柳开
    鸣骹直上一千尺。
                                      鸣骹直上一千尺。          chat: "请背诵柳开的《塞上》。" -> the same text
"""
import re
from dataclasses import dataclass

from qwen.train.sources import FORTUNES_DIR, Doc, chat_doc, choose, stable_hash

# Entries of the `chinese` file that mention any of these are modern quotations or Debian documentation.
MODERN_MARKERS = ("赫拉利", "钱钟书", "鲁迅", "央视", "吴军", "老舍", "巴金", "冰心", "李彦宏", "余光中", "毛泽东",
                  "朱自清", "胡志明", "陈毅", "王健林", "显卡吧", "网吧", "自由软件", "钢之炼金术师", "にちじょう",
                  "一九", "年4月", "Debian")
POEM_QUESTIONS = ("写一首诗。", "请背诵{a}的{t}。", "{t}的全文是什么？", "{t}", "默写{t}。")
QUOTE_QUESTIONS = ("引用{s}中的一段。", "请背诵{s}中的名句。")

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def fortune_entries(path):
    """The entries of a fortune file: ANSI colours removed, split at "%" lines, each line stripped of surrounding
    blanks, runs of blank lines collapsed to one."""
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
    title: str      # with its brackets and any suffix: "《春居杂兴》二首"
    author: str     # without the life dates: "柳开"
    body: str

    def text(self):
        return f"{self.title}\n作者：{self.author}\n\n{self.body}"


def parse_poem(entry):
    """A tang300 / song100 entry (title line, author line, poem) as a Poem, or None when it is not one.
        "题目:《塞上》\\n作者:柳开（９４６－９９９）\\n鸣骹直上一千尺。" -> Poem("《塞上》", "柳开", "鸣骹直上一千尺。")"""
    lines = entry.split("\n")
    if len(lines) < 3:
        return None
    title = re.match(r"^(?:题目[:：])?(《.+?》.*)$", lines[0])
    author = re.match(r"^作者[:：]\s*(.+?)\s*(?:（.*）)?$", lines[1])
    if not (title and author):
        return None
    body = "\n".join(lines[2:]).strip()
    return Poem(title.group(1).strip(), author.group(1), body) if body else None


def split_attribution(entry):
    """A `chinese` fortune as (body, attribution): the attribution is the text after a final "--", or "".
        "学而时习之\\n-- 孔子《论语》" -> ("学而时习之", "孔子《论语》")"""
    m = re.search(r"\n--\s*(.+)$", entry)
    if not m:
        return entry, ""
    return entry[:m.start()].strip(), m.group(1).strip()


def is_classical(entry):
    """Whether an entry is kept: no Latin letters and no MODERN_MARKERS."""
    return not re.search(r"[A-Za-z]", entry) and not any(k in entry for k in MODERN_MARKERS)


def poem_docs(path, kind):
    """The poems of a tang300 / song100 file (`kind` names it): each a plain Doc, and a chat Doc asking for it."""
    docs = []
    for entry in fortune_entries(path):
        poem = parse_poem(entry)
        if poem is None:
            continue
        text = poem.text()
        docs.append(Doc("zh-poetry", text, text))
        question = choose(POEM_QUESTIONS, kind + text).format(a=poem.author, t=poem.title)
        docs.append(chat_doc("zh-poetry-chat", text, question, text))
    return docs


def quote_docs(path):
    """The classical entries of the `chinese` file, each a plain Doc (its attribution after "——"). Half of those
    attributed to a work (作者《题目》, proverbs excepted) also become a chat request to quote them."""
    docs = []
    for entry in fortune_entries(path):
        if not is_classical(entry):
            continue
        body, source = split_attribution(entry)
        text = f"{body}\n——{source}" if source else body
        docs.append(Doc("zh-poetry", text, text))
        if "《" in source and "谚语" not in source and stable_hash("ask:" + text) % 2 == 0:
            question = choose(QUOTE_QUESTIONS, text).format(s=source)
            docs.append(chat_doc("zh-poetry-chat", text, question, body))
    return docs


def chinese_poetry_docs(folder=FORTUNES_DIR):
    """All Chinese documents: Tang poems, Song lyrics, classical quotations."""
    return (poem_docs(folder / "tang300", "tang300") + poem_docs(folder / "song100", "song100")
            + quote_docs(folder / "chinese"))
