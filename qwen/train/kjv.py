"""The King James Bible (Debian's bible-kjv-text, public domain) as corpus documents, one per chapter.

The text is stored compressed and read back through the `bible` program (package bible-kjv). Only KJV_BOOKS are
used. One chapter in four is also a chat request to recite its opening verses:

    Jonah 1                                "Recite Jonah 1:1-3 (KJV)."
                                     ->
    1 Now the word of the LORD ...         "Now the word of the LORD ... Arise, go ... But Jonah rose up ..."
"""
import re
import shutil
import subprocess

from qwen.train.sources import Doc, chat_doc, stable_hash

# Narrative, poetry and wisdom, gospels, a few letters.
KJV_BOOKS = ("Genesis", "Exodus", "Ruth", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
             "Jonah", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians", "James", "Revelation")


def kjv_text():
    """The whole KJV as `bible -l0` prints it: a "Book N" line per chapter, then one indented verse per line."""
    command = [shutil.which("bible") or "bible", "-l0", "Genesis1:1-Revelation22:21"]
    return subprocess.run(command, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL).stdout


def kjv_chapters(text):
    """`bible -l0` output as [(book, chapter, verses)].
        "\\nJonah 1\\n\\n  1 Now the word...\\n  2 Arise, go...\\n" -> [("Jonah", 1, ["Now the word...", "Arise, go..."])]"""
    chapters = []
    for line in text.split("\n"):
        head = re.match(r"^(\S.*) (\d+)$", line)
        verse = re.match(r"^\s+\d+ (.*)$", line)
        if head:
            chapters.append((head.group(1), int(head.group(2)), []))
        elif verse and chapters:
            chapters[-1][2].append(verse.group(1).strip())
    return chapters


def kjv_docs(books=KJV_BOOKS, text=None):
    """A Doc per chapter of `books` ("Book N", a blank line, numbered verses), and for one chapter in four a chat
    Doc asking for its first 3 to 6 verses. `text`: `bible -l0` output (default: run it)."""
    docs = []
    for book, number, verses in kjv_chapters(kjv_text() if text is None else text):
        if book not in books or not verses:
            continue
        chapter = f"{book} {number}\n\n" + "\n".join(f"{i} {v}" for i, v in enumerate(verses, 1)) + "\n"
        docs.append(Doc("kjv", chapter, chapter))
        if stable_hash("recite:" + chapter) % 4 == 0:
            n = min(len(verses), 3 + stable_hash("n:" + chapter) % 4)
            question = f"Recite {book} {number}:1-{n} (KJV)."
            docs.append(chat_doc("kjv-chat", chapter, question, " ".join(verses[:n])))
    return docs
