"""The page as a room sees it, in a real browser (headless Debian chromium through Playwright): the Chinese
page with no English but names in either tab, its own default prompt and a language switch that swaps it
while untouched, the speculative lane's quiet marks and its full-marks switch, presenter-size prompts.
Saves tests/artifacts/page_*.png. Skipped without chromium or playwright.

Never waits for "networkidle": a Gradio page keeps a connection open."""
import os
import shutil

import pytest

from demo.prompts import default_example

pytestmark = pytest.mark.browser               # see pytest.ini
sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts")
WAIT = 90_000                   # CI machines can be several times slower than a laptop
VERDICT = "#race-verdict .verdict.ok, #race-verdict .verdict.bad, #race-verdict .verdict.info"
PHASE = "document.querySelector('#stepper-phase .step-phase')"
ZH_PROMPT, EN_PROMPT = default_example("中文")[1], default_example("English")[1]

if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

# Latin words in the text a visitor sees, less names (of models, layers, tools, units, rollbacks, the
# language switch's "English"). Left out: what the visitor or the model wrote (text boxes, the lanes'
# and the stepper's generated text), the example prompts (the model continues English text), the
# figures' own SVG text (the stepper's figures), the folded JSON summary, 1-px screen-reader text.
ENGLISH_JS = r"""() => {
  const skip = ['textarea', 'script', 'style', '.race-text', '.step-text', '.step-chip', '#race-summary',
                '.js-plotly-plot svg', '#race-examples td:nth-child(2)', '#stepper-examples td:nth-child(2)'].join(', ');
  const names = /^(English|Qwen\S*|MTP|DeltaNet|KV|KJV|Python|PyTorch|Gradio|GPU|CPU|CUDA|JSON|API|Hub|Hugging|Face|select|recompute|float|bfloat|GB|MB|k)$/;
  const out = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const el = walk.currentNode.parentElement;
    if (!el || el.closest(skip) || !el.getClientRects().length) continue;
    const box = el.getBoundingClientRect();
    if (box.width <= 1 || box.height <= 1) continue;
    const text = walk.currentNode.textContent;          // words of 2+ letters, and seconds as "s"
    const words = (text.match(/[A-Za-z]{2,}|(?<=\d ?)s\b/g) || []).filter(w => !names.test(w));
    if (words.length) out.push(text.trim().slice(0, 80));
  }
  return out;
}"""
# the computed marks of a lane's tokens, per origin (the first token of each)
MARKS_JS = r"""(lane) => Object.fromEntries(['draft', 'correction', 'bonus'].map(o => {
  const el = document.querySelector(`${lane} .tok-${o}`);
  if (!el) return [o, null];
  const s = getComputedStyle(el);
  return [o, {line: s.textDecorationLine, style: s.textDecorationStyle, weight: +s.fontWeight,
              edge: s.boxShadow, outline: s.outlineStyle, border: s.borderLeftWidth + s.borderRightWidth,
              padding: s.paddingLeft + s.paddingRight}];
}))"""


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


def open_page(browser, url, width=1400, height=1000):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("#race-prompt textarea", timeout=WAIT)
    page.wait_for_timeout(1000)                  # deep-link and language events settle
    return page


def prompt_is(page, text):
    page.wait_for_function("(want) => document.querySelector('#race-prompt textarea').value === want", arg=text,
                           timeout=WAIT)


def run_race(page):
    page.click("#race-run")
    page.wait_for_selector(VERDICT, timeout=WAIT)
    page.wait_for_function("window.__raceReplay && !window.__raceReplay.playing", timeout=WAIT)   # the replay's end
    page.wait_for_timeout(500)


def shot(page, name):
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, name), full_page=True)


def test_the_chinese_page_has_no_english_but_names_in_either_tab(browser, app_url):
    """?lang=zh opens with the Chinese prompt; after a race, and in the stepper after a step, every word a
    visitor sees is Chinese or a name; Gradio's English footer is gone and <html lang> says Chinese."""
    page = open_page(browser, app_url + "?lang=zh")
    try:
        page.wait_for_function("document.querySelector('#race-run').innerText.includes('开始比赛')", timeout=WAIT)
        prompt_is(page, ZH_PROMPT)
        assert page.evaluate("document.documentElement.lang") == "zh-CN"
        assert not page.locator("footer").is_visible()
        run_race(page)
        shot(page, "page_zh_race.png")
        left = page.evaluate(ENGLISH_JS)
        assert left == [], left
        page.get_by_role("tab", name="逐步查看").click()
        page.wait_for_selector("#stepper-start", timeout=WAIT)
        page.click("#stepper-start")
        page.wait_for_function(f"() => {PHASE} && {PHASE}.dataset.phase === 'prefill'", timeout=WAIT)
        page.locator("#stepper-phase").click()                  # focus out of the text boxes
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => {PHASE}.dataset.phase === 'guess'", timeout=WAIT)
        page.wait_for_timeout(1000)
        shot(page, "page_zh_stepper.png")
        left = page.evaluate(ENGLISH_JS)
        assert left == [], left
    finally:
        page.close()


def test_a_language_switch_swaps_the_untouched_default_prompt_and_keeps_a_typed_one(browser, app_url):
    page = open_page(browser, app_url)
    try:
        prompt_is(page, EN_PROMPT)
        assert page.locator("footer").is_visible()               # the English page keeps Gradio's footer
        page.locator("#lang").get_by_text("中文").click()
        prompt_is(page, ZH_PROMPT)
        page.wait_for_function("document.documentElement.lang === 'zh-CN'", timeout=WAIT)
        page.locator("#lang").get_by_text("English").click()
        prompt_is(page, EN_PROMPT)
        page.fill("#race-prompt textarea", "我自己的提示词")
        page.locator("#lang").get_by_text("中文").click()
        page.wait_for_function("document.querySelector('#race-run').innerText.includes('开始比赛')", timeout=WAIT)
        page.wait_for_timeout(500)
        assert page.input_value("#race-prompt textarea") == "我自己的提示词"
    finally:
        page.close()


def test_the_lane_marks_corrections_and_bonus_plainly_drafts_quietly_and_all_with_full_marks(browser, app_url):
    """Default: a correction has a wavy underline, a bonus token is bold, an accepted draft no mark but a
    tint, and no token has a box or padding that would split a word. Full marks: drafts underlined, each
    token's end shown; the legend says which."""
    page = open_page(browser, app_url)
    try:
        run_race(page)
        marks = page.evaluate(MARKS_JS, "#race-spec")
        assert None not in marks.values(), marks
        assert marks["correction"]["line"] == "underline" and marks["correction"]["style"] == "wavy"
        assert marks["bonus"]["weight"] >= 700
        assert marks["draft"]["line"] == "none" and marks["draft"]["weight"] < 700 and marks["draft"]["edge"] == "none"
        for origin, mark in marks.items():
            assert (mark["outline"], mark["border"], mark["padding"]) == ("none", "0px0px", "0px0px"), origin
        legend = page.inner_text("#race-legend")
        assert "faint tint" in legend and "underlined" not in legend
        page.check("#race-marks input[type=checkbox]")
        page.wait_for_function("document.body.classList.contains('full-marks')", timeout=WAIT)
        full = page.evaluate(MARKS_JS, "#race-spec")
        assert full["draft"]["line"] == "underline" and full["draft"]["edge"] != "none"
        legend = page.inner_text("#race-legend")
        assert "underlined" in legend and "faint tint" not in legend
        page.locator("#race-spec").screenshot(path=os.path.join(ARTIFACTS, "page_lane_full_marks.png"))
        page.uncheck("#race-marks input[type=checkbox]")
        page.wait_for_function("!document.body.classList.contains('full-marks')", timeout=WAIT)
        page.locator("#race-spec").screenshot(path=os.path.join(ARTIFACTS, "page_lane.png"))
    finally:
        page.close()


def test_presenter_mode_makes_the_prompts_and_examples_large(browser, app_url):
    """At 1280x720 with ?presenter=1 both tabs' prompts are at least 24 px and show all four lines of the
    Chinese prompt; the example tables at least 20 px."""
    page = open_page(browser, app_url + "?presenter=1&lang=zh", 1280, 720)
    size = "(sel) => parseFloat(getComputedStyle(document.querySelector(sel)).fontSize)"
    try:
        page.wait_for_function("document.body.classList.contains('presenter')", timeout=WAIT)
        prompt_is(page, ZH_PROMPT)
        page.wait_for_timeout(500)
        assert page.evaluate(size, "#race-prompt textarea") >= 24
        assert page.evaluate(size, "#race-examples td") >= 20
        fits = "(sel) => { const t = document.querySelector(sel); return t.scrollHeight <= t.clientHeight + 2; }"
        assert page.evaluate(fits, "#race-prompt textarea")
        shot(page, "page_presenter_zh.png")
        page.get_by_role("tab", name="逐步查看").click()
        page.wait_for_selector("#stepper-prompt textarea", timeout=WAIT)
        page.wait_for_timeout(500)
        assert page.evaluate(size, "#stepper-prompt textarea") >= 24
        assert page.evaluate(size, "#stepper-examples td") >= 20
    finally:
        page.close()
