"""Tokens as text and as HTML, for the race and the stepper alike.

Byte-level BPE can split one UTF-8 character (most Chinese ones) over two or three tokens; token_pieces
gives the whole character to the token that completed it:

    [好 = e5 a5 bd] tokens (b"\\xe5\\xa5", b"\\xbd!") -> pieces ["", "好!"]

Every piece is escaped, and a line break shows as a faint ↵ (text_html). A token's origin is shown by
colour AND, where it matters, by a mark that needs no colour; accepted drafts (most of the text) stay
quiet unless the page's "full marks" switch is on (the class `full-marks` on <body>, demo/static/app.css):

    main        first token, from the prompt pass         plain
    draft       accepted draft token                      a faint sky-blue tint (full marks: underlined)
    correction  main model's token for a rejected draft   wavy underline, vermillion tint
    bonus       extra token when every draft was right    bold, bluish-green tint

Marks are tints, underlines and weight, never boxes or padding: a word split over tokens stays one word.
"""
from html import escape

from qwen.chat import Detokenizer

from demo.i18n import t
from demo.choices import ORIGINS


def token_pieces(decode, ids):
    """The text of each token, whole characters attributed to the token completing them.
    "".join(token_pieces(decode, ids)) == decode(ids)."""
    detok = Detokenizer(decode)
    pieces = [detok.push(t) for t in ids]
    if pieces:
        pieces[-1] += detok.flush()
    return pieces


def text_html(piece):
    """Escaped text; each line break gets a faint ↵ so that newline-only tokens can be seen."""
    return escape(piece).replace("\n", '<span class="nl" aria-hidden="true">↵</span>\n')


def token_spans(pieces, origins, lang="English"):
    """One <span> per token with text, classed by origin (tokens that completed no character are skipped)."""
    titles = {o: escape(t(f"origin_{o}", lang)) for o in ORIGINS}
    return "".join(f'<span class="tok tok-{o}" title="{titles.get(o, "")}">{text_html(p)}</span>'
                   for p, o in zip(pieces, origins) if p)


def mark_html(origin, lang="English"):
    """How tokens of `origin` are marked, in words: "" for main (plain); for drafts both the quiet and the
    full-marks words, each shown only while the page shows that mark (classes mark-quiet / mark-full)."""
    if origin == "draft":
        return (f' <span class="mark-quiet">{escape(t("mark_draft", lang))}</span>'
                f'<span class="mark-full">{escape(t("mark_full_draft", lang))}</span>')
    return f' {escape(t(f"mark_{origin}", lang))}' if origin in ("correction", "bonus") else ""


def legend_html(lang="English"):
    """A sample of each origin's mark with what it means and how it is marked."""
    sample = escape(t("legend_sample", lang))
    items = "".join(f'<span><span class="tok tok-{o}">{sample}</span> '
                    f'{escape(t(f"origin_{o}", lang))}{mark_html(o, lang)}</span>' for o in ORIGINS)
    return f'<div class="legend" aria-label="{escape(t("legend", lang))}">{items}</div>'
