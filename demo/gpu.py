"""The GPU a visitor gets on Hugging Face Spaces. On ZeroGPU hardware a GPU is attached only while a function
decorated with `spaces.GPU` runs, for at most the seconds it asks for; elsewhere (a whole GPU, a CPU, no
`spaces` package installed) the decorator changes nothing.

    @on_gpu(race_seconds)              # race_seconds gets the function's own arguments
    def run_race(prompt, max_new_tokens=120, ...): ...

    clock = device_clock(model)        # time.perf_counter, after the GPU has finished what was queued
"""
import functools
import time

import torch

try:                                   # installed by requirements.txt; absent in a bare environment
    import spaces
except ImportError:                    # pragma: no cover - the tests run with it installed
    spaces = None

SECONDS_PER_TOKEN = 0.05               # a generous budget per token and lane on a ZeroGPU slice (bf16, eager)
LEAST_SECONDS, MOST_SECONDS = 20, 120


def on_gpu(duration):
    """Decorator: fn inside spaces.GPU(duration=duration) where the `spaces` package is installed (which
    itself does nothing outside ZeroGPU), else fn unchanged. duration: seconds, or a function of fn's
    arguments that returns them."""
    def wrap(fn):
        return spaces.GPU(duration=duration)(fn) if spaces is not None else fn
    return wrap


def generation_seconds(max_new_tokens, lanes=2):
    """The GPU seconds to ask for: `lanes` generations of max_new_tokens tokens, within ZeroGPU's limits."""
    try:
        tokens = max(1, int(max_new_tokens))
    except (TypeError, ValueError):
        tokens = 120
    return int(min(MOST_SECONDS, max(LEAST_SECONDS, LEAST_SECONDS / 2 + lanes * tokens * SECONDS_PER_TOKEN)))


def race_seconds(prompt=None, max_new_tokens=120, k=2, rollback="select", *args, **kwargs):
    """The race's request: a plain lane and one speculative lane per rollback (two for "both")."""
    return generation_seconds(max_new_tokens, lanes=3 if rollback == "both" else 2)


def device_clock(model, clock=time.perf_counter):
    """A clock that first waits for the model's device to finish its queued work (a CUDA device runs
    asynchronously: without this a lane's seconds would count launches, not work); `clock` as is on a CPU."""
    device = model.embed_tokens.weight.device
    if device.type != "cuda":
        return clock

    @functools.wraps(clock)
    def synced():
        torch.cuda.synchronize(device)
        return clock()
    return synced
