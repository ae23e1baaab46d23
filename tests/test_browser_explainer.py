"""The whole app in a real browser, as a talk audience and a first visitor see it: the first screen on a
desktop and a phone, presenter sizes, a Chinese page with no English left after an example is clicked,
quick → presses that all count, one heatmap colour scale across rounds, and figure titles that never
overlap at 1400 and 390 px. Step latency is printed (pytest -s), not asserted. Screenshots go to
tests/artifacts/. Skipped without Playwright or Chromium."""
import os
import re
import shutil

import pytest

pytestmark = pytest.mark.browser               # see pytest.ini
sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts")
WAIT = 90_000                   # CI machines can be several times slower than a laptop

if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

PHASE = "document.querySelector('#stepper-phase .step-phase')"
# English words (3+ letters) in text the page itself wrote: model output, prompts, tokens, the example
# prompts, Gradio's own footer and the language's own name are left out; so are technical names
ENGLISH_JS = r"""() => {
  const skip = 'textarea, script, style, footer, .race-text, .step-chip, .step-text, td, #race-summary';
  const names = /^(English|Qwen\S*|MTP|DeltaNet|KV|JSON|KJV|Python|PyTorch|Hub|Hugging|Face|select|recompute|key|value|float|bfloat|eager|tok|API|CPU)$/;
  const out = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const el = walk.currentNode.parentElement;
    if (!el || el.closest(skip) || !el.getClientRects().length) continue;
    const box = el.getBoundingClientRect();              // screen-reader-only text (Gradio's own, e.g.
    if (box.width <= 1 || box.height <= 1) continue;     // "common.complete") is 1 px: nobody sees it
    const words = (walk.currentNode.textContent.match(/[A-Za-z]{3,}/g) || []).filter(w => !names.test(w));
    if (words.length) out.push(walk.currentNode.textContent.trim().slice(0, 60));
  }
  return out;
}"""
# the boxes of every figure's title and panel titles, per figure: [[{x, y, w, h, text}, ...], ...]
TITLE_BOXES_JS = r"""(sel) => [...document.querySelectorAll(sel + ' .js-plotly-plot')].map(plot =>
  [...plot.querySelectorAll('.gtitle, .annotation-text')].filter(e => e.textContent.trim())
    .map(e => { const r = e.getBoundingClientRect();
                return {x: r.x, y: r.y, w: r.width, h: r.height, text: e.textContent}; }))"""


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


def open_page(browser, url, width, height):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("#race-prompt textarea", timeout=WAIT)
    page.wait_for_timeout(1000)                  # deep-link and language events settle
    return page


def open_settings(page, box):
    """Unfold a settings accordion (they start folded) unless it is open already."""
    if not page.locator(f"{box} input").first.is_visible():
        page.locator(f"{box} > button.label-wrap").click()
        page.locator(f"{box} input").first.wait_for(state="visible", timeout=WAIT)


def shot(page, name):
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, name)
    page.screenshot(path=path, full_page=True)
    return path


@pytest.mark.parametrize("width, height", [(1400, 1000), (390, 844)])
def test_first_screen_has_a_prompt_and_run_above_the_fold(browser, app_url, width, height):
    page = open_page(browser, app_url, width, height)
    try:
        assert page.input_value("#race-prompt textarea").strip()                    # prefilled
        run = page.locator("#race-run").bounding_box()
        assert run and run["y"] + run["height"] <= height, run                       # no scrolling to Run
        assert not page.locator("#race-k").is_visible()                             # Settings folded
        assert page.locator("#race-examples tbody tr").count() >= 5
        page.screenshot(path=os.path.join(ARTIFACTS, f"first_screen_{width}.png"))
    finally:
        page.close()


def font_px(page, selector):
    return float(page.evaluate(f"parseFloat(getComputedStyle(document.querySelector({selector!r})).fontSize)"))


def test_presenter_mode_enlarges_race_text_stats_verdict_and_stepper_hints(browser, app_url):
    page = open_page(browser, app_url, 1400, 1000)
    try:
        open_settings(page, "#race-settings")
        page.fill("#race-max-new input[type=number]", "12")
        page.press("#race-max-new input[type=number]", "Tab")
        page.click("#race-run")
        page.wait_for_selector("#race-verdict .verdict.ok, #race-verdict .verdict.bad", timeout=WAIT)
        assert "tokens per main-model pass" in page.inner_text("#race-verdict")
        assert "predict" in page.inner_text("#race-verdict")
        parts = ["#race-plain .race-text", "#race-plain-stats .num", "#race-verdict .verdict",
                 "#race-verdict .speed-line", "#race-legend .legend"]
        page.get_by_role("tab", name="Step through").click()
        parts += ["#stepper-legend .legend", "#stepper-keys-help p"]
        page.wait_for_selector("#stepper-keys-help p", state="attached", timeout=WAIT)   # shown once a run exists
        before = {p: font_px(page, p) for p in parts}
        page.check("#presenter input[type=checkbox]")
        page.wait_for_function("document.body.classList.contains('presenter')", timeout=WAIT)
        page.wait_for_timeout(300)
        after = {p: font_px(page, p) for p in parts}
        for p in parts:
            assert after[p] >= 1.4 * before[p], (p, before[p], after[p])
        page.get_by_role("tab", name="The race").click()
        shot(page, "race_presenter.png")
        page.uncheck("#presenter input[type=checkbox]")
    finally:
        page.close()


def test_the_chinese_page_has_no_english_left_after_clicking_an_example(browser, app_url):
    page = open_page(browser, app_url + "?lang=zh", 1400, 1000)
    try:
        page.wait_for_function("document.querySelector('#race-run').innerText.includes('开始比赛')", timeout=WAIT)
        page.locator("#race-examples tbody tr").nth(2).click()
        page.wait_for_function("document.querySelector('#race-prompt textarea').value.endsWith('故人具鸡')",
                               timeout=WAIT)
        page.wait_for_timeout(500)
        assert page.evaluate(ENGLISH_JS) == []
        assert "提示词" in page.inner_text("#race-prompt")
        page.get_by_role("tab", name="逐步查看").click()
        page.wait_for_selector("#stepper-start", timeout=WAIT)
        page.click("#stepper-start")
        page.wait_for_function(f"() => {PHASE} && {PHASE}.dataset.phase === 'prefill'", timeout=WAIT)
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => {PHASE}.dataset.phase === 'guess'", timeout=WAIT)
        page.wait_for_timeout(500)
        left = [x for x in page.evaluate(ENGLISH_JS) if not re.fullmatch(r"[\d\s.,:%×→−\-]*", x)]
        assert left == []
        shot(page, "stepper_zh.png")
    finally:
        page.close()


def start_stepper(page, prompt, rollback="recompute", k=2, max_new=40):
    page.get_by_role("tab", name="Step through").click()
    page.wait_for_selector("#stepper-start", timeout=WAIT)
    page.fill("#stepper-prompt textarea", prompt)
    open_settings(page, "#stepper-settings")
    page.fill("#stepper-max-new input[type=number]", str(max_new))
    page.fill("#stepper-k input[type=number]", str(k))
    page.press("#stepper-k input[type=number]", "Tab")
    page.locator("#stepper-rollback").get_by_text(rollback, exact=False).first.click()
    page.click("#stepper-start")
    page.wait_for_function(f"() => {PHASE} && {PHASE}.dataset.phase === 'prefill'", timeout=WAIT)
    page.locator("#stepper-phase").click()                    # focus out of the text boxes


def memory_scale(page):
    return page.evaluate("() => { const g = document.querySelector('#stepper-memory .js-plotly-plot');"
                         " return g && g.layout ? [g.layout.coloraxis.cmax, g.layout.coloraxis2.cmax] : null; }")


def test_quick_presses_all_count_and_the_heatmap_scale_stays_fixed(browser, app_url):
    page = open_page(browser, app_url, 1400, 1000)
    try:
        start_stepper(page, "The LORD is my shepherd;")
        for _ in range(3):                                    # a clicker: three presses 150 ms apart
            page.keyboard.press("ArrowRight")
            page.wait_for_timeout(150)
        page.wait_for_function(f"() => {PHASE}.dataset.step === '3'", timeout=WAIT)
        page.wait_for_timeout(1500)
        assert page.evaluate(f"{PHASE}.dataset.step") == "3" and page.evaluate(f"{PHASE}.dataset.phase") == "accept"
        scales, heights = set(), set()
        for step in range(4, 13):
            page.keyboard.press("ArrowRight")
            page.wait_for_function(f"() => {PHASE}.dataset.step === '{step}'", timeout=WAIT)
            page.wait_for_timeout(200)
            scales.add(tuple(memory_scale(page)))
            heights.add(page.evaluate("document.querySelector('#stepper-panel').getBoundingClientRect().height"))
        assert len(scales) == 1, scales                        # one colour scale for the whole run
        assert max(heights) - min(heights) <= 40, heights      # nothing jumps between phases
        latency = page.evaluate("window.__stepLatency")
        latency = sorted(latency)
        print(f"\nstep latency, press to painted heading: median {latency[len(latency) // 2]:.0f} ms, "
              f"max {latency[-1]:.0f} ms over {len(latency)} steps")
        shot(page, "stepper_recompute.png")
    finally:
        page.close()


def overlaps(boxes):
    """Pairs of title boxes that intersect (by more than a pixel each way)."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a["x"] + 1 < b["x"] + b["w"] and b["x"] + 1 < a["x"] + a["w"] and \
                    a["y"] + 1 < b["y"] + b["h"] and b["y"] + 1 < a["y"] + a["h"]:
                out.append((a["text"], b["text"]))
    return out


@pytest.mark.parametrize("width", [1400, 390])
def test_figure_titles_never_overlap(browser, app_url, width):
    page = open_page(browser, app_url, width, 1000)
    try:
        start_stepper(page, "1 In the beginning God created the heaven and the earth.", max_new=24)
        for step in (1, 2, 3):
            page.keyboard.press("ArrowRight")
            page.wait_for_function(f"() => {PHASE}.dataset.step === '{step}'", timeout=WAIT)
        page.wait_for_timeout(1500)
        figures = page.evaluate(TITLE_BOXES_JS, "#stepper-panel")
        assert len(figures) >= 6 and all(figures)
        for boxes in figures:
            assert overlaps(boxes) == [], boxes[0]["text"]
        shot(page, f"stepper_{width}.png")
    finally:
        page.close()
