"""Page-wide pieces without a browser: how a speculative lane marks its tokens (demo/tokens.py, and the
rules of demo/static/app.css that draw the marks), the prompt each language opens with, and words that
the model line and the legend need in both languages. (tests/test_browser_page.py looks at the page.)"""
import re

import pytest

from demo import theme
from demo.i18n import LANGS, STRINGS, t
from demo.prompts import DEFAULT_EXAMPLE, EXAMPLES, default_example, default_prompt_for
from demo.tokens import legend_html, token_spans
from demo.choices import ORIGINS
from qwen.compiled.host import Strategy

CSS = (theme.STATIC / "app.css").read_text(encoding="utf-8")
CJK = re.compile(r"[\u4e00-\u9fff]")


def css_rules(css=CSS):
    """{selector: {property: value}} of the file's rules outside @media, comments and !important dropped;
    a rule with several selectors counts for each."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    css = re.sub(r"@media[^{]*\{(?:[^{}]*\{[^{}]*\})*[^{}]*\}", "", css)
    rules = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        props = dict((name.strip(), value.replace("!important", "").strip()) for name, value in
                     (decl.split(":", 1) for decl in body.split(";") if ":" in decl))
        for selector in selectors.split(","):
            rules.setdefault(" ".join(selector.split()), {}).update(props)
    return rules


RULES = css_rules()


# --- the lane's marks ---

def test_a_lane_classes_each_token_by_origin_and_skips_empty_pieces():
    html = token_spans(["Be", "hold", "", " the", " LORD"], ["main", "draft", "draft", "correction", "bonus"])
    assert re.findall(r'class="tok tok-(\w+)"', html) == ["main", "draft", "correction", "bonus"]
    assert 'title="accepted draft"' in html                  # a tooltip says what, the mark says how


def test_corrections_and_bonus_tokens_are_marked_plainly_and_accepted_drafts_quietly():
    """By default a correction has a wavy underline and a bonus token is bold (each with a tint); an
    accepted draft only a faint tint: no underline, no weight, no box."""
    correction, bonus, draft = RULES[".tok-correction"], RULES[".tok-bonus"], RULES[".tok-draft"]
    assert correction["text-decoration-line"] == "underline" and correction["text-decoration-style"] == "wavy"
    assert int(bonus["font-weight"]) >= 700
    assert set(draft) == {"background"} and float(draft["background"].rsplit(",", 1)[1].rstrip(") ")) <= 0.15
    assert not any(".tok-main" in selector for selector in RULES)           # the first token: plain


def test_full_marks_underline_every_accepted_draft_and_show_token_ends():
    full = RULES["body.full-marks .tok-draft"]
    assert full["text-decoration-line"] == "underline" and full["text-decoration-style"] == "solid"
    assert "box-shadow" in RULES["body.full-marks .tok"] and "box-shadow" not in RULES[".tok"]


def test_no_mark_opens_a_gap_inside_a_word():
    """A token's mark is a tint, an underline or weight: no rule of a lane's tokens adds a border, an
    outline, padding or margin (the legend's samples may be padded), and a token broken over two lines
    keeps its tint on both."""
    for selector, props in RULES.items():
        if re.search(r"\.tok\b", selector) and not selector.startswith(".legend"):
            boxy = [p for p in props if p.split("-")[0] in ("border", "outline", "padding", "margin")
                    and p != "border-radius"]
            assert boxy == [], (selector, boxy)
    assert RULES[".tok"]["box-decoration-break"] == "clone"


@pytest.mark.parametrize("lang", LANGS)
def test_the_legend_names_the_mark_the_lane_shows_with_full_marks_on_or_off(lang):
    """The draft's entry holds both descriptions; the CSS shows the quiet one by default and the full one
    with full marks, so the legend stays true to the lane."""
    legend = legend_html(lang)
    assert all(f'class="tok tok-{o}"' in legend for o in ORIGINS)
    quiet = f'<span class="mark-quiet">{t("mark_draft", lang)}</span>'
    full = f'<span class="mark-full">{t("mark_full_draft", lang)}</span>'
    assert quiet in legend and full in legend
    assert t("mark_correction", lang) in legend and t("mark_bonus", lang) in legend
    assert RULES[".legend .mark-full"]["display"] == "none" == RULES["body.full-marks .legend .mark-quiet"]["display"]
    assert RULES["body.full-marks .legend .mark-full"]["display"] == "inline"


# --- the prompt each language opens with ---

def test_each_language_opens_with_a_prompt_in_it():
    english, chinese = (default_example(lang) for lang in LANGS)
    assert english == DEFAULT_EXAMPLE and not CJK.search(english[1])
    assert chinese in EXAMPLES and CJK.search(chinese[1]) and chinese[0] == "kind_poem"
    assert english[2:] == chinese[2:]                   # same raw switch and length: a switch swaps the prompt only


@pytest.mark.parametrize("lang", LANGS)
def test_a_language_switch_swaps_an_untouched_default_prompt_and_keeps_a_typed_one(lang):
    other = next(x for x in LANGS if x != lang)
    assert default_prompt_for(default_example(other)[1], lang) == default_example(lang)[1]
    assert default_prompt_for(default_example(lang)[1], lang) == default_example(lang)[1]
    for typed in ("My own prompt", default_example(other)[1] + " more", ""):
        assert default_prompt_for(typed, lang) == typed


# --- words ---

def test_every_host_strategy_has_words_in_both_languages():
    """The model line names the host's strategy (demo.frame.plan_text); English as the command line
    prints it (the Strategy's value)."""
    for strategy in Strategy:
        english, chinese = STRINGS[f"plan_{strategy.name}"]
        assert english == strategy.value and chinese and CJK.search(chinese)


@pytest.mark.parametrize("key, says", [
    ("model_compiled", [("optimized graphs", "计算图")]),
    ("model_compiled_more", [("optimized graphs", "计算图")]),
    ("model_compiling", [("optimized graphs", "计算图"), ("plain PyTorch", "普通 PyTorch")]),
    ("model_eager", [("plain PyTorch", "普通 PyTorch")]),
    ("plan_eager", [("eager", "普通 PyTorch")]),
])
def test_the_model_line_says_in_plain_words_what_compiled_and_eager_mean(key, says):
    english, chinese = STRINGS[key]
    for en, zh in says:
        assert en in english and zh in chinese
    assert "eager" not in chinese
