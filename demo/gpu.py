"""The GPU a visitor gets on Hugging Face Spaces. On ZeroGPU hardware a GPU is attached only while a function
decorated with `spaces.GPU` runs, for at most the seconds it asks for; elsewhere (a whole GPU, a CPU, no
`spaces` package installed) the decorator changes nothing.

    @on_gpu(race_seconds)              # race_seconds gets the function's own arguments
    def run_race(prompt, max_new_tokens=120, ...): ...

    clock = device_clock(model)        # time.perf_counter, after the GPU has finished what was queued
    report = warm_up_ahead(model, head, ks=(2,))   # ZeroGPU: compiled passes, built ahead of time in spaces.GPU
"""
import functools
import time

import torch

from qwen.compiled import Why, warm_up

try:                                   # installed by requirements.txt; absent in a bare environment
    import spaces
except ImportError:                    # pragma: no cover - the tests run with it installed
    spaces = None

SECONDS_PER_TOKEN = 0.05               # a generous budget per token and lane on a ZeroGPU slice (bf16, eager)
LEAST_SECONDS, MOST_SECONDS = 20, 120
AHEAD_SECONDS = 900                    # building every pass's package once, at start-up (minutes on a GPU)


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


def race_seconds(prompt=None, max_new_tokens=120, *args, rollback="select", tree="", **kwargs):
    """The race's request: a plain lane and one speculative lane per rollback (two for "both"), or a chain
    lane and a tree lane (the race event's arguments: its first two inputs by position, the rest by name)."""
    return generation_seconds(max_new_tokens, lanes=3 if rollback == "both" or tree else 2)


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


def warm_up_ahead(model, head, ks=(2,)):
    """warm_up with every pass built ahead of time (qwen/compiled/ahead.py), inside spaces.GPU. On ZeroGPU
    that runs in a process of its own, forked from this one, and its changes stay there: the package files
    it builds are on disk for every later GPU call, and what it decided (which passes to use, each status)
    comes back and is settled here. Where the call itself fails (no GPU granted, a quota spent), every pass
    stays eager with that reason. model, head: views made with ahead=True. -> {"status", "seconds", "speedups"}"""
    parts = [model.steps] + ([head.steps] if head is not None else [])

    def build_packages(ks):
        report = warm_up(model, head, ks, ahead=True)
        return [part.decided() for part in parts], {key: report[key] for key in ("status", "seconds", "speedups")}
    try:
        decided, report = on_gpu(AHEAD_SECONDS)(build_packages)(tuple(ks))
    except Exception as e:                 # spaces raises its own errors for a refused or aborted call
        for part in parts:
            part.disable(Why.FAILED, f"spaces.GPU: {type(e).__name__}: {str(e)[:200]}")
        return {"status": model.steps.status, "seconds": 0.0, "speedups": {}}
    for part, outcome in zip(parts, decided):
        part.settle(outcome)
    return report
