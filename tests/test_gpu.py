"""demo.gpu and the device settings: what runs the model asks ZeroGPU for a GPU, and nothing changes elsewhere."""
import functools
import inspect
import time

import pytest
import torch

from demo import environment, gpu
from qwen.compiled.host import host_plan
from test_mtp import random_pair


def test_the_decorator_changes_nothing_outside_zerogpu():
    def lane(n):
        yield from range(n)
    assert gpu.on_gpu(gpu.race_seconds)(lane) is lane                  # spaces.GPU: effect-free off ZeroGPU
    assert list(gpu.on_gpu(30)(lane)(3)) == [0, 1, 2]


def test_the_seconds_asked_for_grow_with_the_tokens_and_lanes_within_zerogpus_limits():
    assert gpu.race_seconds("hi", 16) == gpu.LEAST_SECONDS
    assert gpu.race_seconds("hi", 400) < gpu.race_seconds("hi", 400, rollback="both") <= gpu.MOST_SECONDS
    assert gpu.race_seconds("hi", 10_000) == gpu.MOST_SECONDS
    assert gpu.race_seconds("hi", "many") == gpu.generation_seconds(120)       # unreadable: the default length


def test_a_cpu_models_clock_is_the_clock_itself():
    model, _ = random_pair("small", seed=1)
    assert gpu.device_clock(model) is time.perf_counter


@pytest.mark.parametrize("environ, want", [
    ({"QWEN_DEVICE": "cpu"}, "cpu"), ({"QWEN_DEVICE": "CUDA"}, "cuda"),
    ({}, "cuda" if torch.cuda.is_available() else "cpu"), ({"QWEN_DEVICE": "tpu"}, "cuda" if torch.cuda.is_available() else "cpu"),
])
def test_qwen_device_chooses_where_models_run(environ, want):
    assert environment.device(environ) == want


def test_zerogpu_compiles_nothing_by_default_and_says_so():
    assert environment.zero_gpu({"SPACES_ZERO_GPU": "true"}) and not environment.zero_gpu({})
    assert environment.compile_wanted({}) and not environment.compile_wanted({"SPACES_ZERO_GPU": "1"})
    assert environment.compile_wanted({"SPACES_ZERO_GPU": "1", "QWEN_COMPILE": "1"})      # asked for: tried
    model, _ = random_pair("small", seed=2)
    plan = host_plan(model, compile=False, eager_why="ZeroGPU has no torch.compile")
    assert plan.strategy is None and plan.why == "ZeroGPU has no torch.compile"


class FakeSpaces:
    """A stand-in for the `spaces` package on ZeroGPU: GPU(duration=...) records, per call of a decorated
    function, its name, the seconds asked (the duration function run on the call's own arguments, as
    spaces does) and whether the function's body ran while the GPU was held."""

    def __init__(self):
        self.calls, self.held = [], False

    def GPU(self, duration=60):
        def wrap(fn):
            def asked(args, kwargs):
                return duration(*args, **kwargs) if callable(duration) else duration

            if inspect.isgeneratorfunction(fn):
                @functools.wraps(fn)
                def held_gen(*args, **kwargs):
                    call = {"name": fn.__name__, "seconds": asked(args, kwargs), "ran": False}
                    self.calls.append(call)
                    self.held = True
                    try:
                        for out in fn(*args, **kwargs):
                            call["ran"] = True
                            yield out
                    finally:
                        self.held = False
                return held_gen

            @functools.wraps(fn)
            def held(*args, **kwargs):
                call = {"name": fn.__name__, "seconds": asked(args, kwargs), "ran": True}
                self.calls.append(call)
                self.held = True
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.held = False
            return held
        return wrap


@pytest.fixture
def zerogpu_page(monkeypatch):
    """The app's page built on "ZeroGPU": the flag set, a fake `spaces` in place of the real one. -> (fake, blocks)"""
    from demo import models, page
    fake = FakeSpaces()
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setattr(gpu, "spaces", fake)
    return fake, page.build_app(models.ModelStore())


def decorated(blocks, api_name):
    """The function behind one of the page's API endpoints."""
    return next(fn.fn for fn in blocks.fns.values() if fn.api_name == api_name)


def test_on_zerogpu_a_race_runs_inside_spaces_gpu_asking_seconds_that_grow_with_its_length(zerogpu_page):
    fake, blocks = zerogpu_page
    race = decorated(blocks, "race")
    outputs = list(race("In the beginning", 6, k=2, rollback="select", temperature=0.0, seed=0, raw=True))
    summary = outputs[-1][-1]                     # the race ran: both lanes, the same 6 tokens
    assert summary["plain"]["tokens"] == 6 and summary["identical"]
    assert fake.calls[-1]["name"] == "run_race" and fake.calls[-1]["ran"]
    short = fake.calls[-1]["seconds"]
    assert 0 < short <= gpu.MOST_SECONDS
    list(race("In the beginning", 300, k=2, rollback="select", temperature=0.0, seed=0, raw=True))
    assert fake.calls[-1]["seconds"] > short


def test_on_zerogpu_a_stepper_recording_runs_inside_spaces_gpu_asking_seconds_that_grow_with_its_length(zerogpu_page):
    fake, blocks = zerogpu_page
    start = decorated(blocks, "step_start")
    session_box, status_box = next(fn for fn in blocks.fns.values() if fn.api_name == "step_start").outputs[:2]
    controls = dict(prompt="In the beginning", k=2, rollback="select", temperature=0.0, seed=0, watch_layer=None,
                    watch_head=None, raw=True, tree="", auto=False, language="en", presenter_on=False, client=None)
    before = len(fake.calls)
    out = start(None, max_new_tokens=4, **controls)             # {component: update}
    session, message = out[session_box], out[status_box]
    assert session.run is not None and "Recorded 4 tokens" in message
    short = fake.calls[before]
    assert short["name"] == "on_start" and short["ran"] and short["seconds"] > 0
    start(None, max_new_tokens=200, **controls)
    assert fake.calls[-1]["seconds"] > short["seconds"]


def test_a_gpu_models_clock_waits_for_the_device_before_reading_the_time(monkeypatch):
    """A stand-in CUDA model: the clock synchronises its device first, every time it is read."""
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))

    class OnCuda:
        class embed_tokens:
            class weight:
                device = torch.device("cuda", 0)
    ticks = iter([1.0, 2.5])
    clock = gpu.device_clock(OnCuda, clock=lambda: next(ticks))
    assert clock() == 1.0 and clock() == 2.5
    assert synced == [torch.device("cuda", 0)] * 2


def test_where_zerogpu_refuses_the_build_call_every_pass_stays_eager_with_the_reason(monkeypatch):
    from qwen.compiled import Phase, Why, compile_head, compile_model

    class Refusing:
        def GPU(self, duration=60):
            def wrap(fn):
                def refused(*args, **kwargs):
                    raise RuntimeError("ZeroGPU quota exceeded")
                return refused
            return wrap
    monkeypatch.setattr(gpu, "spaces", Refusing())
    model, head = random_pair("small", seed=4)
    fast = compile_model(model, ahead=True)
    fast_head = compile_head(head, model=fast, ahead=True)
    report = gpu.warm_up_ahead(fast, fast_head)
    for part in (fast.steps, fast_head.steps):
        assert part.status.phase is Phase.EAGER and part.status.why is Why.FAILED
        assert "ZeroGPU quota exceeded" in part.status.detail and part.lookup(1) is None
    assert report["status"] is fast.steps.status
