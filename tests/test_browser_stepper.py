"""The stepper tab in a real browser: start a run on the embedded checkpoint, step three rounds with the
→ key, check the phase labels and that the memory heatmaps change, and save a screenshot
(tests/artifacts/stepper.png). Skipped when Playwright or Chromium is missing."""
import os
import shutil

import pytest

from conftest import free_port

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts", "stepper.png")

pytestmark = pytest.mark.browser               # see pytest.ini
sync_api = pytest.importorskip("playwright.sync_api")
if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
    pytest.skip("no Chromium at /usr/bin/chromium", allow_module_level=True)


@pytest.fixture(scope="module")
def page_url():
    import gradio as gr

    from demo import i18n, models, theme
    from demo.frame import Shared
    from demo.stepper.ui import build_stepper_tab
    store = models.ModelStore()
    with gr.Blocks() as demo:
        lang = gr.Radio(list(i18n.LANGS), value="English", label="Language")
        presenter = gr.Checkbox(False, label="Presenter")
        model = gr.Dropdown(store.choices, value=store.default, label="Model")
        prompt = gr.Textbox("The river", label="Race prompt")
        with gr.Tab("Step through"):
            build_stepper_tab(Shared(store=store, model=model, lang=lang, presenter=presenter, prompt=prompt))
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                        **theme.launch_options())
    yield f"http://127.0.0.1:{port}/"
    demo.close()


EXPECTED = {"guess": ("Guess",), "verify": ("Verify",), "accept": ("Accept", "Roll back")}
PHASE = "document.querySelector('.step-phase')"
HEATMAPS = ("() => { const g = document.querySelector('#stepper-memory .js-plotly-plot');"
            " return g && g.data ? g.data.filter(t => t.type === 'heatmap' && t.visible !== false)"
            ".map(t => JSON.stringify(t.z)) : null; }")


def wait_phase(page, phase, round_):
    page.wait_for_function(f"() => {{ const p = {PHASE}; return p && p.dataset.phase === '{phase}'"
                           f" && p.dataset.round === '{round_}'; }}", timeout=20_000)


def test_step_three_rounds_with_the_keyboard(page_url):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(page_url, wait_until="domcontentloaded")
            page.wait_for_selector("#stepper-start", timeout=30_000)
            page.locator("#stepper-settings > button.label-wrap").click()      # settings start folded
            page.fill("#stepper-max-new input[type=number]", "24")
            page.check("#stepper-raw input")                   # raw completion: no early end of a chat turn
            page.click("#stepper-start")
            wait_phase(page, "prefill", "0")
            assert "Recorded" in page.inner_text("#stepper-status")
            page.locator("#stepper-prompt textarea").click()
            page.keyboard.press("ArrowRight")                  # typing: the key moves the caret, not the step
            page.wait_for_timeout(500)
            assert page.evaluate(f"{PHASE}.dataset.phase") == "prefill"
            page.locator("#stepper-phase").click()             # leave the textbox
            seen = {}
            for r in (1, 2, 3):
                for phase in ("guess", "verify", "accept"):
                    page.keyboard.press("ArrowRight")
                    wait_phase(page, phase, str(r))
                    label = page.inner_text(".step-phase")
                    assert any(word in label for word in EXPECTED[phase])
                    page.wait_for_function(f"() => ({HEATMAPS})() && ({HEATMAPS})().length === "
                                           f"{ {'guess': 1, 'verify': 3, 'accept': 6}[phase] }", timeout=60_000)
                    seen[(r, phase)] = page.evaluate(HEATMAPS)
            # each round starts from a different memory, and verify writes into it
            assert len({seen[(r, "guess")][0] for r in (1, 2, 3)}) == 3
            assert all(seen[(r, "verify")][1] != seen[(r, "verify")][0] for r in (1, 2, 3))
            page.keyboard.press("ArrowLeft")
            wait_phase(page, "verify", "3")
            os.makedirs(os.path.dirname(ARTIFACT), exist_ok=True)
            page.screenshot(path=ARTIFACT, full_page=True)
            assert os.path.getsize(ARTIFACT) > 10_000
        finally:
            browser.close()
