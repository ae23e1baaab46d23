"""demo.gpu and the device settings: what runs the model asks ZeroGPU for a GPU, and nothing changes elsewhere."""
import time

import pytest
import torch

from demo import gpu, settings
from qwen.compiled.plan import host_plan
from test_mtp import random_pair


def test_the_decorator_changes_nothing_outside_zerogpu():
    def lane(n):
        yield from range(n)
    assert gpu.on_gpu(gpu.race_seconds)(lane) is lane                  # spaces.GPU: effect-free off ZeroGPU
    assert list(gpu.on_gpu(30)(lane)(3)) == [0, 1, 2]


def test_the_seconds_asked_for_grow_with_the_tokens_and_lanes_within_zerogpus_limits():
    assert gpu.race_seconds("hi", 16) == gpu.LEAST_SECONDS
    assert gpu.race_seconds("hi", 400) < gpu.race_seconds("hi", 400, 2, "both") <= gpu.MOST_SECONDS
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
    assert settings.device(environ) == want


def test_zerogpu_compiles_nothing_by_default_and_says_so():
    assert settings.zero_gpu({"SPACES_ZERO_GPU": "true"}) and not settings.zero_gpu({})
    assert settings.compile_wanted({}) and not settings.compile_wanted({"SPACES_ZERO_GPU": "1"})
    assert settings.compile_wanted({"SPACES_ZERO_GPU": "1", "QWEN_COMPILE": "1"})      # asked for: tried
    model, _ = random_pair("small", seed=2)
    plan = host_plan(model, compile=False, eager_why="ZeroGPU has no torch.compile")
    assert plan.strategy is None and plan.why == "ZeroGPU has no torch.compile"
