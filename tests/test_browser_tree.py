"""Draft trees in a real browser (the whole app, headless chromium): the stepper's tree mode walked phase by
phase at 1400, 1024 and 390 px in both languages with no box overlapping another or leaving the page, each
step's press-to-paint printed; and the race's tree lane beside the chain, identical text, the verdict naming
the winner. Saves tests/artifacts/tree_*.png. Skipped without chromium or playwright."""
import os
import shutil

import pytest

pytestmark = pytest.mark.browser               # see pytest.ini
sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts")
WAIT = 120_000                                  # CI machines can be much slower than this one
PHASE = "document.querySelector('.step-phase')"
FIGURES = ("#stepper-layers", "#stepper-memory", "#stepper-change", "#stepper-conv", "#stepper-kv")
# each box's extent as drawn (a box's content may need more than the box: scroll size), and the page's width
BOXES = ("(ids) => { const out = {}; for (const s of ids) { const e = document.querySelector(s);"
         " if (!e || !e.offsetParent) continue; const r = e.getBoundingClientRect();"
         " out[s] = [r.left, r.top + window.scrollY, Math.max(r.width, e.scrollWidth), Math.max(r.height, e.scrollHeight)]; }"
         " out.page = document.documentElement.clientWidth; return out; }")
IDS = ["#stepper-text", "#stepper-legend", "#stepper-table", "#stepper-explain", *FIGURES]

if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def overlapping(boxes):
    names = [k for k in boxes if k != "page"]           # noqa: the page's width is not a box
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (ax, ay, aw, ah), (bx, by, bw, bh) = boxes[a], boxes[b]
            if ax < bx + bw - 1 and bx < ax + aw - 1 and ay < by + bh - 1 and by < ay + ah - 1:
                out.append((a, b))
    return out


def settled(page, tries=40):
    """The boxes once two readings 250 ms apart agree (plotly redraws for a new width a moment later)."""
    boxes = page.evaluate(BOXES, IDS)
    for _ in range(tries):
        page.wait_for_timeout(250)
        again = page.evaluate(BOXES, IDS)
        if again == boxes:
            break
        boxes = again
    return boxes


def wait_step(page, step):
    page.wait_for_function(f"() => {{ const p = {PHASE}; return p && p.dataset.step === '{step}'; }}", timeout=WAIT)


def test_the_tree_mode_steps_without_overlap_at_every_width_in_both_languages(browser, app_url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(app_url + "?view=step&tree=2%2B1&max_new=12&raw=1", wait_until="domcontentloaded")
        page.wait_for_selector("#stepper-start", timeout=WAIT)
        page.wait_for_timeout(1000)                                    # the link's values arrive
        page.click("#stepper-start")
        page.wait_for_function(f"() => {PHASE} && {PHASE}.dataset.phase === 'prefill'", timeout=WAIT)
        for step in (1, 2, 3):
            page.locator("#stepper-phase").click()                     # out of the language radio: → steps
            page.keyboard.press("ArrowRight")
            wait_step(page, step)
            phase = page.evaluate(f"{PHASE}.dataset.phase")
            for lang in ("English", "中文"):
                page.locator("label", has_text=lang).first.click()
                words = "Draft tree" if lang == "English" else "草稿树"
                page.wait_for_function(f"() => document.querySelector('#stepper-layers').innerText.includes('{words}')",
                                       timeout=WAIT)
                for width, height in ((1400, 1000), (1024, 800), (390, 844)):
                    page.set_viewport_size({"width": width, "height": height})
                    boxes = settled(page)
                    assert set(FIGURES) <= set(boxes), (phase, lang, width, sorted(boxes))
                    assert not overlapping(boxes), (phase, lang, width, overlapping(boxes))
                    page_width = boxes.pop("page")
                    assert all(x >= -1 and x + w <= page_width + 1 for x, _, w, _ in boxes.values()), \
                        (phase, lang, width, boxes)
                    if step == 2 and width in (1400, 390):
                        os.makedirs(ARTIFACTS, exist_ok=True)
                        page.screenshot(path=os.path.join(ARTIFACTS, f"tree_verify_{width}_{lang[:2]}.png"),
                                        full_page=True)
            page.set_viewport_size({"width": 1400, "height": 1000})
            page.locator("label", has_text="English").first.click()
            page.wait_for_function("() => document.querySelector('#stepper-layers').innerText"
                                   ".includes('Draft tree 2+1')", timeout=WAIT)      # the link chose the tree
            text = page.inner_text("#stepper-explain")
            assert {1: "Guess, as a tree", 2: "Verify", 3: "Accept"}[step] in text
        # the pitfall is drawn: the row-order panels of the memory figure say "wrong" for the sibling's rows
        titles = page.evaluate("() => [...document.querySelectorAll('#stepper-memory .annotation-text')]"
                               ".map(e => e.textContent)")
        assert any("wrong" in x for x in titles) and any("same" in x for x in titles)
        page.locator("#stepper-phase").click()
        for step in range(4, 10):                                       # walk on: press-to-paint, printed
            page.keyboard.press("ArrowRight")
            wait_step(page, step)
        latency = sorted(page.evaluate("window.__stepLatency"))
        print(f"\ntree mode, press to painted heading: median {latency[len(latency) // 2]:.0f} ms, "
              f"max {latency[-1]:.0f} ms over {len(latency)} steps")
    finally:
        page.close()


def test_the_race_runs_a_tree_lane_beside_the_chain_and_says_which_wins(browser, app_url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(app_url, wait_until="domcontentloaded")
        page.wait_for_selector("#race-prompt textarea", timeout=WAIT)
        page.locator("#race-settings > button.label-wrap").click()
        page.locator("#race-max-new input").first.wait_for(state="visible", timeout=WAIT)
        assert not page.locator("#race-third-lane").is_visible()
        page.locator("#race-tree label", has_text="2+1").first.click()
        page.wait_for_selector("#race-third-lane", state="visible", timeout=WAIT)
        assert "tree 2+1" in page.inner_text("#race-third-title")
        page.fill("#race-max-new input[type=number]", "32")
        page.press("#race-max-new input[type=number]", "Tab")
        page.click("#race-run")
        page.wait_for_selector("#race-verdict .tree-speed", timeout=WAIT)
        winner = page.get_attribute("#race-verdict .tree-speed", "data-winner")
        assert winner in ("tree", "chain", "level")
        verdict = page.inner_text("#race-verdict")
        assert "all 3 runs" in verdict and "Tree 2+1" in verdict and "tokens per main-model pass" in verdict
        assert "tree 2+1" in page.inner_text("#race-third-stats")
        lanes = ("plain", "spec", "third")
        for _ in range(60):                                            # the replay ends (slow motion: up to a minute)
            texts = [page.inner_text(f"#race-{lane} .race-text").strip() for lane in lanes]
            if texts[0] and texts[0] == texts[1] == texts[2]:
                break
            page.wait_for_timeout(1_000)
        assert texts[0] and texts[0] == texts[1] == texts[2]
        os.makedirs(ARTIFACTS, exist_ok=True)
        page.screenshot(path=os.path.join(ARTIFACTS, "tree_race.png"), full_page=True)
        page.locator("label", has_text="中文").first.click()
        page.wait_for_timeout(800)
        assert "树 2+1" in page.inner_text("#race-third-title")
        page.locator("#race-tree label").first.click()                 # off again: two lanes
        page.wait_for_selector("#race-third-lane", state="hidden", timeout=WAIT)
        page.locator("label", has_text="English").first.click()
    finally:
        page.close()
