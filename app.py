"""The Gradio app: wiring only (the logic lives in demo/, the engine in qwen/).

    python app.py                         # embedded demo checkpoint; Qwen3.5 hub models on demand
    python app.py --model-dir PATH        # also offer a local model folder (repeatable)

Environment: GRADIO_SERVER_PORT / GRADIO_SERVER_NAME (where to listen), QWEN_MODEL (default model:
folder or hub id), QWEN_MODEL_DIRS (more local folders, os.pathsep-separated), CPU_CORES (torch
threads, default one fewer than the machine has; one generation at a time per 8 cores),
QWEN_CONCURRENCY, QWEN_QUEUE_SIZE, QWEN_MAX_SECONDS
(wall-clock cap of one generation, default 120), QWEN_MAX_PROMPT_TOKENS, QWEN_DTYPE, QWEN_SESSION_TTL,
QWEN_MAX_SESSIONS, QWEN_MAX_REQUEST_MB (per-session memory and request size: see demo/serving.py).
"""
import sys

import gradio as gr

from demo import models, serving, theme
from demo.frame import build_header, wire_header
from demo.i18n import DEFAULT_LANG, t
from demo.race_ui import build_race_tab
from demo.stepper.ui import build_stepper_tab

models.configure_threads()
ARGS = models.parse_args(sys.argv[1:] if __name__ == "__main__" else [])
store = models.ModelStore.from_environment(ARGS.model_dirs)
store.preload()                         # a local default loads now; hub models on first use

# delete_cache: Gradio's copies of uploaded and exported traces go after a day, checked hourly
with gr.Blocks(title="Qwen3.5 speculative decoding", delete_cache=(3600, 86400)) as demo:
    shared = build_header(store)
    shared["blocks"], shared["stepper_tab_id"] = demo, "stepper"
    labelled = {}                       # i18n key of a tab's label -> the tab, relabelled with the language
    with gr.Tabs() as shared["tabs"]:
        with gr.Tab(t("tab_race", DEFAULT_LANG), id="race") as labelled["tab_race"]:
            build_race_tab(shared)
        with gr.Tab(t("tab_stepper", DEFAULT_LANG), id="stepper") as labelled["tab_stepper"]:
            build_stepper_tab(shared)
    wire_header(demo, shared, labelled)
    serving.attach(demo)                # closing the page frees the session's memory

demo.queue(max_size=models.queue_size(), default_concurrency_limit=1)

if __name__ == "__main__":
    demo.launch(**theme.launch_options(), **serving.launch_options())
