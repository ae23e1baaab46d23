"""The Gradio app: wiring only (the page is built by demo.page, its logic lives in demo/, the engine in qwen/).

    python app.py                         # embedded demo checkpoint; Qwen3.5 hub models on demand
    python app.py --model-dir PATH        # also offer a local model folder (repeatable)

Importing this module builds the page (`demo`, where Gradio looks for it) and nothing more: torch's
threads and the default model are set up by `python app.py` (demo.page.serve). The environment
variables it reads are listed, with their defaults, in demo/environment.py.
"""
import sys

from demo import gpu  # noqa: F401  first: on ZeroGPU the `spaces` package must come before anything uses CUDA
from demo import models, page

ARGS = models.parse_args(sys.argv[1:] if __name__ == "__main__" else [])
store = models.ModelStore.from_environment(ARGS.model_dirs)
demo = page.build_app(store)

if __name__ == "__main__":
    page.serve(demo, store)
