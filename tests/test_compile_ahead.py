"""Graphs built ahead of time (qwen/compiled/ahead.py, ZeroGPU's way to compile): exported, built by
AOTInductor on this CPU, and held to eager decoding: the same tokens, plain and speculative with both
rollbacks; the same states; package files that a later start (or a fresh ZeroGPU process) loads instead
of building; and the eager fallback, with its reason, where a package cannot be built."""
import copy
import multiprocessing
import os
import pickle
import shutil
import subprocess
import time
import zipfile

import pytest
import torch

from qwen.cache import State, keep_step_states
from qwen.compiled import Phase, Why, host, warm_up
from qwen.compiled.ahead import AheadGraphs, flatten, rebuild, structure_key
from qwen.compiled.host import Strategy, choose_strategy, host_plan
from qwen.compiled.saved import model_step
from qwen.mtp import generate_mtp
from qwen.sample import generate
from test_mtp import assert_same_state, prompts, random_pair

pytestmark = [pytest.mark.compile,
              pytest.mark.skipif(host.compiler_missing() is not None, reason="no C++ compiler")]
K = 2


@pytest.fixture(scope="module")
def ahead_pair(tmp_path_factory):
    """A random model and head whose passes for k = 2 (both rollbacks) are built ahead of time."""
    cache = tmp_path_factory.mktemp("ahead")
    previous, os.environ["QWEN_COMPILE_CACHE"] = os.environ.get("QWEN_COMPILE_CACHE"), str(cache)
    try:
        model, head = random_pair("small")
        report = warm_up(model, head, ks=(K,), rollbacks=("select", "recompute"), keep_if_faster=False, ahead=True)
        yield model, head, report, cache
    finally:
        os.environ.pop("QWEN_COMPILE_CACHE") if previous is None else os.environ.update(QWEN_COMPILE_CACHE=previous)


def test_every_pass_is_built_ahead_of_time_and_kept(ahead_pair):
    _, _, report, _ = ahead_pair
    fast, fast_head = report["model"], report["head"]
    assert report["status"].phase is Phase.COMPILED, report["status"]
    assert fast.steps.strategy is Strategy.AHEAD and isinstance(fast.steps.fn, AheadGraphs)
    assert fast.steps.ready == {(1, False), (1 + K, True), (1 + K, False)}
    assert fast_head.steps.ready == {(1, False), (1 + K, False)}
    assert fast_head.rounds is None              # rounds stay step by step: ZeroGPU's models are wide


@pytest.mark.parametrize("rollback", ["select", "recompute"])
def test_plain_and_speculative_decoding_through_the_packages_equal_eager(ahead_pair, rollback):
    model, head, report, _ = ahead_pair
    fast, fast_head = report["model"], report["head"]
    built = fast.steps.fn.compiled, fast_head.steps.fn.compiled
    with torch.inference_mode():
        for ids in prompts(model.cfg.vocab_size, n=3):
            plain = generate(model, ids, max_new_tokens=20)
            assert generate(fast, ids, max_new_tokens=20) == plain
            assert generate_mtp(fast, fast_head, ids, max_new_tokens=20, k=K, rollback=rollback)[0] == plain
    assert (fast.steps.fn.compiled, fast_head.steps.fn.compiled) == built      # nothing built mid-generation


def test_a_pass_writes_the_state_in_place_as_eager_does_at_any_kv_capacity(ahead_pair):
    model, _, report, _ = ahead_pair
    graphs = report["model"].steps.fn
    built = graphs.compiled
    for prompt in (5, 70):                        # 70: a KV capacity of 128, where warm-up saw 64
        state = State(model)
        with torch.inference_mode():
            model.hidden(torch.arange(prompt)[None] % model.cfg.vocab_size, state)
        twin = copy.deepcopy(state)
        for s in (state, twin):
            keep_step_states(s, 1 + K)
        ids = torch.tensor([[3, 1, 4]])
        positions = state.begin_pass(ids)
        twin.begin_pass(ids)
        with torch.inference_mode():
            logits, hidden = graphs((1 + K, True), ids, positions, state)
            want_logits, want_hidden = model.step(ids, positions, twin)
        for s in (state, twin):
            s.end_pass(1 + K)
        torch.testing.assert_close(logits, want_logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(hidden, want_hidden, atol=1e-4, rtol=1e-4)
        assert_same_state(state, twin, atol=1e-5)
        for got, want in zip(state.deltanet_layers(), twin.deltanet_layers()):      # the kept writes too
            for name in ("conv_steps", "row_decay", "row_k", "row_delta"):
                torch.testing.assert_close(getattr(got, name)[:1 + K], getattr(want, name)[:1 + K],
                                           atol=1e-5, rtol=1e-5)
    assert graphs.compiled == built               # one package for every capacity


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf (binutils)")
def test_no_package_asks_for_an_executable_stack(ahead_pair, tmp_path):
    """A library that asks for one is refused by a recent glibc (as on ZeroGPU); readelf is the judge."""
    packages = list(ahead_pair[3].rglob("*.pt2"))
    assert len(packages) == 5                     # decode, verify keeping step states or not; the head's two
    for package in packages:
        with zipfile.ZipFile(package) as archive:
            libraries = [name for name in archive.namelist() if name.endswith(".so")]
            assert libraries
            for name in libraries:
                (tmp_path / "lib.so").write_bytes(archive.read(name))
                headers = subprocess.run(["readelf", "-lW", str(tmp_path / "lib.so")], capture_output=True,
                                         text=True, check=True).stdout
                stack = next(line for line in headers.splitlines() if "GNU_STACK" in line)
                assert "RWE" not in stack and " RW " in stack, stack


def test_a_later_start_or_a_fresh_process_loads_the_packages_instead_of_building(ahead_pair):
    model, _, report, cache = ahead_pair
    graphs = report["model"].steps.fn
    again = AheadGraphs(model_step, graphs.owners, graphs.name, graphs.folder)
    ids = torch.tensor([[2, 7]])
    with torch.inference_mode():
        state = State(model)
        model.hidden(ids, state)
        tok = torch.tensor([[5]])
        positions = state.begin_pass(tok)
        twin = copy.deepcopy(state)
        logits, _ = again((1, False), tok, positions, state)
        torch.testing.assert_close(logits, model.step(tok, positions, twin)[0], atol=1e-4, rtol=1e-4)
        assert (again.loaded, again.compiled) == (1, 0)
        again.pid = -1                            # as in a process forked after loading (a ZeroGPU call)
        again((1, False), tok, positions, copy.deepcopy(twin))
        assert (again.loaded, again.compiled) == (2, 0)


def test_a_damaged_package_is_built_again(ahead_pair, tmp_path):
    model, _, report, _ = ahead_pair
    graphs = report["model"].steps.fn
    fresh = AheadGraphs(model_step, graphs.owners, graphs.name, tmp_path)
    state = State(model)
    with torch.inference_mode():
        model.hidden(torch.tensor([[1, 2]]), state)
    tok = torch.tensor([[4]])
    positions = state.begin_pass(tok)
    args = (tok, positions, state)
    path = fresh.path(((1, False), 1, structure_key(flatten(args)[1])))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a package")
    with torch.inference_mode():
        fresh((1, False), *args)
    assert (fresh.loaded, fresh.compiled) == (0, 1) and path.stat().st_size > 100


def test_flatten_and_rebuild_give_back_the_same_buffers(ahead_pair):
    model, _, _, _ = ahead_pair
    state = State(model)
    model.hidden(torch.tensor([[1, 2, 3]]), state)
    tensors, structure = flatten((torch.tensor([[1]]), state))
    ids, again = rebuild(structure, tensors)
    assert again is not state and len(again.layers) == len(state.layers)
    for a, b in zip(again.layers, state.layers):
        assert type(a) is type(b) and all(getattr(a, n) is getattr(b, n) for n in vars(b)
                                          if isinstance(getattr(b, n), torch.Tensor))


def test_a_package_that_cannot_be_built_leaves_decoding_eager_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))

    def refuse(*args, **kwargs):
        raise RuntimeError("AOTInductor refused")
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", refuse)
    model, head = random_pair("small", seed=3)
    report = warm_up(model, head, ks=(1,), keep_if_faster=False, ahead=True)
    assert report["status"].phase is Phase.EAGER and report["status"].why is Why.FAILED
    assert "AOTInductor refused" in report["status"].detail
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        assert generate(report["model"], ids, max_new_tokens=6) == generate(model, ids, max_new_tokens=6)


def test_ahead_of_time_is_chosen_where_asked_and_named_on_the_model_line():
    model, _ = random_pair("small")
    assert choose_strategy([model], ahead=True)[0] is Strategy.AHEAD
    assert choose_strategy([model])[0] is not Strategy.AHEAD
    assert "ahead-of-time graphs" in str(host_plan(model, ahead=True))


class ForkingSpaces:
    """`spaces` on ZeroGPU as it behaves: each call of a function decorated with GPU(duration) runs in a
    process forked for it, its arguments and result pickled across, and nothing else it changes comes back."""

    def __init__(self):
        self.calls = []

    def GPU(self, duration=60):
        def wrap(fn):
            def held(*args, **kwargs):
                self.calls.append((fn.__name__, duration(*args, **kwargs) if callable(duration) else duration))
                context = multiprocessing.get_context("fork")
                results = context.SimpleQueue()
                args, kwargs = pickle.loads(pickle.dumps((args, kwargs)))

                def child():
                    try:
                        results.put(("ok", fn(*args, **kwargs)))
                    except BaseException as e:                  # noqa: B036 - carried to the parent
                        results.put(("error", f"{type(e).__name__}: {e}"))
                process = context.Process(target=child)
                process.start()
                kind, value = results.get()
                process.join()
                assert kind == "ok", value
                return value
            return held
        return wrap


def test_on_zerogpu_the_app_builds_the_passes_in_a_gpu_process_and_serves_them_from_the_files(monkeypatch, tmp_path):
    from demo import gpu, models
    fake = ForkingSpaces()
    monkeypatch.setattr(gpu, "spaces", fake)
    for name, value in (("SPACES_ZERO_GPU", "true"), ("QWEN_COMPILE", "1"), ("QWEN_COMPILE_CACHE", str(tmp_path))):
        monkeypatch.setenv(name, value)
    loaded = models.load_model(models.EMBEDDED_KEY, models.EMBEDDED)
    assert loaded.plan.strategy is Strategy.AHEAD and "ahead-of-time graphs" in str(loaded.plan)
    deadline = time.monotonic() + 1200
    while loaded.serving is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert fake.calls == [("build_packages", gpu.AHEAD_SECONDS)]
    assert loaded.compile_status().phase is Phase.COMPILED, loaded.compile_status()
    fast, fast_head = loaded.engine()
    assert fast.steps.ready == {(1, False), (1 + K, True)} and fast.steps.fn.compiled == 0   # built over there
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        plain = generate(loaded.model, ids, max_new_tokens=12)
        assert generate(fast, ids, max_new_tokens=12) == plain
        assert generate_mtp(fast, fast_head, ids, max_new_tokens=12, k=K)[0] == plain
    assert (fast.steps.fn.loaded, fast.steps.fn.compiled) == (2, 0)      # its files, loaded here
