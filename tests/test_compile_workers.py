"""Compiling in helper processes (qwen/compiled/workers.py): the graphs a helper saves are the ones the
parent looks for, so the parent loads them instead of compiling them; a helper that fails leaves its
graphs to the parent; decoding equals eager either way."""
import sys

import pytest
import torch

from qwen.compiled import Phase, host, steps, warmup
from qwen.compiled import workers as compile_workers
from qwen.compiled.view import plain
from qwen.mtp import generate_mtp
from qwen.sample import generate
from reference import SMALL
from test_mtp import random_pair

pytestmark = pytest.mark.compile               # the whole module: see pytest.ini
needs_compiler = pytest.mark.skipif(host.compiler_missing() is not None, reason="no C++ compiler")

TWO_LAYERS = dict(SMALL, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])


def graph_counts(model, head):
    """(compiled here, loaded from disk) over the model's, the head's and the round's saved graphs."""
    graphs = [model.steps.fn, head.steps.fn, head.rounds.fn]
    return sum(g.compiled for g in graphs), sum(g.loaded for g in graphs)


def decodes_as_eager(model, head, seed):
    eager, _ = random_pair(TWO_LAYERS, seed=seed)
    ids = torch.tensor([[4, 8, 15, 16, 23, 42]])
    plain = generate(eager, ids, max_new_tokens=24)
    return generate(model, ids, max_new_tokens=24) == plain and \
        generate_mtp(model, head, ids, max_new_tokens=24, k=1)[0] == plain


@needs_compiler
def test_graphs_a_helper_compiled_are_loaded_not_compiled_again(monkeypatch, tmp_path):
    """Two processes at once: of each warm-up phase's missing graphs warm_up compiles the first itself and
    a helper the others, and meanwhile this process compiles the next phase's first one ahead: the
    decode step and the verify pass here and the round there, then one head pass here and one there."""
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setenv("QWEN_COMPILE_WORKERS", "2")
    model, head = random_pair(TWO_LAYERS, seed=31)
    report = warmup.warm_up(model, head, ks=(1,), keep_if_faster=False)
    model, head = report["model"], report["head"]
    assert report["status"].phase is Phase.COMPILED, report
    passes = len(model.steps.variants) + len(head.steps.variants) + len(head.rounds.variants)
    assert passes == 5                                          # decode, verify of 2, head 1 and 2, round
    assert graph_counts(model, head) == (3, 2)
    assert decodes_as_eager(model, head, seed=31)


@needs_compiler
def test_a_helper_that_fails_leaves_its_graphs_to_the_parent(monkeypatch, tmp_path):
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setenv("QWEN_COMPILE_WORKERS", "2")
    monkeypatch.setattr(sys, "executable", "/bin/false")                # every helper exits at once, failing
    model, head = random_pair(TWO_LAYERS, seed=32)
    report = warmup.warm_up(model, head, ks=(1,), keep_if_faster=False)
    model, head = report["model"], report["head"]
    assert report["status"].phase is Phase.COMPILED, report
    assert graph_counts(model, head) == (5, 0)
    assert decodes_as_eager(model, head, seed=32)


def test_helpers_are_used_only_for_graphs_saved_on_disk_and_missing(monkeypatch, tmp_path):
    """Frozen graphs (and CUDA graphs) live in one process; a graph already on disk is simply loaded;
    one process allowed means no helpers."""
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    model, head = random_pair(TWO_LAYERS, seed=33)
    model = steps.compile_model(model, ks=(1,), freeze=True)
    assert compile_workers.missing([(model.steps, (1, False))]) == []
    head = steps.compile_head(head, ks=(1,), freeze=False)
    passes = [(head.steps, v) for v in sorted(head.steps.variants)]
    assert compile_workers.missing(passes) == passes
    head.steps.fn.path(passes[1][1], 1).parent.mkdir(parents=True, exist_ok=True)
    head.steps.fn.path(passes[1][1], 1).write_bytes(b"")                 # "saved" already
    assert compile_workers.missing(passes) == passes[:1]
    assert compile_workers.start(model, head, passes + passes, 32, workers=1).handed_off == []
    weights = host.weight_bytes([model, head], buffers=True)             # what a helper loads
    monkeypatch.setattr(host, "memory_available", lambda: 1000)           # no room for another copy of the weights
    assert not host.copies_fit(weights, 1)[0]
    assert compile_workers.start(model, head, passes + passes, 32, workers=2).handed_off == []
    assert host.copies_fit(weights, 1, available=2**30)[0]


def test_modules_that_do_not_pickle_are_compiled_here(monkeypatch, tmp_path):
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    model, head = random_pair(TWO_LAYERS, seed=35)
    head = steps.compile_head(head, ks=(1,), freeze=False)
    passes = [(head.steps, v) for v in sorted(head.steps.variants)]
    assert len(compile_workers.missing(passes)) == 2
    assert host.copies_fit(host.weight_bytes([model, head], buffers=True), 1)[0]
    head.not_picklable = lambda: None                                   # a local function does not pickle
    assert compile_workers.start(model, head, passes, 32, workers=2).handed_off == []


@pytest.mark.parametrize("value, want", [("3", 3), ("1", 1), ("0", 1)])
def test_qwen_compile_workers_sets_how_many_processes_compile(monkeypatch, value, want):
    monkeypatch.setenv("QWEN_COMPILE_WORKERS", value)
    assert compile_workers.worker_count() == want
    monkeypatch.setenv("QWEN_COMPILE_WORKERS", "many")
    with pytest.raises(ValueError, match="whole number"):
        compile_workers.worker_count()


def test_a_pickled_model_keeps_its_weights_and_layout_but_not_its_compiled_steps(tmp_path):
    model, head = random_pair(TWO_LAYERS, seed=34)
    fast = steps.compile_model(model, ks=(1,), freeze=False)              # lays weights out transposed, streams them
    torch.save(plain(fast), tmp_path / "job.pt")                        # as workers.start hands it over
    clone = torch.load(tmp_path / "job.pt", weights_only=False)
    assert type(clone) is type(model) and not hasattr(clone, "steps")     # the module, not its view
    mine, theirs = dict(model.named_parameters()), dict(clone.named_parameters())
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[n], theirs[n]) for n in mine)
    assert all(theirs[n].stride() == mine[n].stride() for n in mine)     # laid out as this process has them
