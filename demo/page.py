"""The whole page: the frame and both tabs in one gr.Blocks, and how it is served.

    store = models.ModelStore.from_environment(model_dirs)
    demo = build_app(store)                 # builds the page; loads no model, leaves torch's threads alone
    serve(demo, store)                      # torch threads, the default model, then demo.launch(...)

app.py does exactly this (Gradio looks for its module-level `demo`); the load test (tools.loadtest) and
the tests (tests/conftest.py) serve the same page.
"""
import gradio as gr

from demo import environment, models, serving, theme
from demo.frame import build_header, wire_header
from demo.i18n import DEFAULT_LANG, t
from demo.race_ui import build_race_tab
from demo.stepper import drawn, traceio
from demo.stepper.ui import build_stepper_tab

STEPPER_TAB = "stepper"         # the stepper tab's id (a link with ?view=step selects it)


def build_app(store):
    """The page for the models of `store` (a demo.models.ModelStore), with its queue. -> gr.Blocks
    Nothing is loaded here: the model line fills in when a page opens, models on first use or in serve()."""
    # delete_cache: Gradio's copies of uploaded and exported traces go after a day, checked hourly
    with gr.Blocks(title="Qwen3.5 speculative decoding", delete_cache=(3600, 86400)) as demo:
        shared = build_header(store)
        shared.blocks, shared.stepper_tab_id = demo, STEPPER_TAB
        labelled = {}                   # i18n key of a tab's label -> the tab, relabelled with the language
        with gr.Tabs() as shared.tabs:
            with gr.Tab(t("tab_race", DEFAULT_LANG), id="race") as labelled["tab_race"]:
                build_race_tab(shared)
            with gr.Tab(t("tab_stepper", DEFAULT_LANG), id=STEPPER_TAB) as labelled["tab_stepper"]:
                build_stepper_tab(shared)
        wire_header(demo, shared, labelled)
        serving.attach(demo)            # closing the page frees the session's memory
    demo.queue(max_size=environment.queue_size(), default_concurrency_limit=1)
    return demo


def launch_options():
    """The keyword arguments of demo.launch() for this page: its look and its limits."""
    return {**theme.launch_options(), **drawn.launch_options(), **serving.launch_options(traceio.MAX_BYTES)}


def serve(demo, store, **launch):
    """Serve the page: set torch's threads ($CPU_CORES), load the default model when it is on disk
    (hub models wait for their first use), then demo.launch(**launch_options(), **launch)."""
    models.configure_threads()
    store.preload()
    return demo.launch(**launch_options(), **launch)
