"""The compiled engine, second half (a file of its own so that two test processes share the compiling):
the embedded model compiled once as the app does (its decoding against eager, the stepper's prediction
against the race's), graphs saved whole and loaded at a later start, guards checked once, and a wide
model streaming its weights. Eager is the reference throughout."""
import pytest
import torch

from demo import models, race
from demo.prompts import DEFAULT_EXAMPLE, prepare
from demo.environment import max_prompt_tokens
from demo.stepper import figures, recording, ui
from demo.validate import RaceSettings
from qwen.bench import as_checkpoint
from qwen.cache import AttentionState, State
from qwen.compiled import Phase, host, steps, warmup
from qwen.model import Model
from qwen.mtp import MTP, generate_mtp
from qwen.sample import generate
from qwen.scripted import ScriptedHead
from qwen.weights import EMBEDDED
from reference import SMALL
from test_mtp import prompts, random_pair

pytestmark = pytest.mark.compile               # the whole module: see pytest.ini
needs_compiler = pytest.mark.skipif(host.compiler_missing() is not None, reason="no C++ compiler")
TWO_LAYERS = dict(SMALL, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])


@pytest.fixture(scope="module")
def app_compiled():
    """The app's default, compiled as the app compiles it: the embedded model and its head loaded by
    demo.models, warm_up for k = 2 (unfrozen, as small models are: their graphs cache whole on disk), a
    helper process compiling beside this one, as on the app's 2-core hosts; every pass kept, so that all
    of them are checked below. -> demo.models.Loaded, serving the compiled views"""
    loaded = models.load_model(models.EMBEDDED_KEY, EMBEDDED, compile=False)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("QWEN_COMPILE_WORKERS", "2")
        report = warmup.warm_up(loaded.model, loaded.mtp, ks=(2,), keep_if_faster=False)
    assert report["status"].phase is Phase.COMPILED and report["step_speedup"] > 0, report
    loaded.views = loaded.serving = report["model"], report["head"]   # how models.start_compiling leaves it
    return loaded


@needs_compiler
def test_compiled_decoding_equals_eager_on_the_embedded_model(app_compiled):
    """Its grouped-query attention with head_dim 64 is the shape where a boolean attention mask once made
    the compiled step corrupt memory."""
    model, head = app_compiled.engine()
    eager = Model.from_pretrained(app_compiled.path)
    assert model.steps.strategy is head.steps.strategy is steps.Strategy.STREAMED, model.steps.why
    assert head.rounds.ready == head.sampled_rounds.ready == {(3, True)}          # greedy and sampled rounds
    for prompt in ("In the beginning God created", "def fibonacci(n):\n    "):
        ids = app_compiled.chat.encode(prompt)
        plain = generate(eager, ids, max_new_tokens=48)
        assert generate(model, ids, max_new_tokens=48) == plain
        for rollback in ("select", "recompute"):
            assert generate_mtp(model, head, ids, max_new_tokens=48, k=2, rollback=rollback)[0] == plain
        for temperature, seed in ((0.7, 2), (0.4, 3), (1.1, 4)):       # rounds through the sampled round graph
            sampled = generate(eager, ids, max_new_tokens=48, temperature=temperature, seed=seed)
            assert generate(model, ids, max_new_tokens=48, temperature=temperature, seed=seed) == sampled
            assert generate_mtp(model, head, ids, max_new_tokens=48, k=2, temperature=temperature, seed=seed)[0] == sampled


@needs_compiler
@pytest.mark.parametrize("rollback", ["select", "recompute"])
def test_the_stepper_predicts_the_speedup_the_race_predicts(app_compiled, rollback):
    """The stepper and the race tell one story: the speed-up the stepper's what-if marks for "this run" is
    the one the race predicts for the same prompt, k and rollback (both from qwen.costs: this host's costs,
    measured once by the race and read by the stepper, and each run's own tokens per round, which must agree)."""
    _, prompt, raw, _ = DEFAULT_EXAMPLE
    settings = RaceSettings(prompt, 48, 2, rollback, 0.0, 0, raw, False, [])
    ids, _ = prepare(app_compiled, settings, max_prompt_tokens())
    done = list(race.race(app_compiled, ids, settings))[-1]
    raced = race.summary(app_compiled.key, done.plain, done.lanes, settings, lane_costs=done.lane_costs)
    # the stepper, as its Start button runs it: read the controls, encode, record, draw
    step_settings, _ = ui.read_settings(prompt, k=2, rollback=rollback, max_new_tokens=48, temperature=0.0, seed=0,
                                        watch_layer=0, watch_head=0, raw=raw)
    step_ids, _ = ui.encode(app_compiled, step_settings)
    run = recording.record_run(*app_compiled.engine(), app_compiled.chat, step_ids, step_settings, app_compiled.key)
    whatif = figures.what_if(run, figures.Look())                           # the figure the view draws
    marker = next(t for t in whatif.data if t.name.startswith("this run: a = "))
    assert run.output_ids == raced["speculative"]["ids"]                   # the same tokens in the same rounds
    assert len(run.records) - 1 == raced["speculative"]["rounds"]
    stepper, racer = marker.y[0], raced["predicted_speedup"]
    print(f"{rollback}: stepper predicts {stepper:.3f}x, race predicts {racer:.3f}x "
          f"(measured race {raced['speedup']:.3f}x; stepper costs {run.costs}, race costs {raced['costs']})")
    assert stepper == pytest.approx(figures.this_run_speedup(run))
    assert abs(stepper / racer - 1) <= 0.10


@needs_compiler
def test_a_later_start_loads_the_saved_graphs_instead_of_compiling(monkeypatch, tmp_path):
    """Unfrozen CPU graphs are saved whole (qwen/saved.py). A later start, here a second model of the
    same shape with other weights, loads them, compiles nothing, and decodes as eager does, with one
    graph for every KV capacity; a model of another shape does not take them."""
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    ids, long = torch.tensor([[5, 1, 7]]), torch.randint(0, SMALL["vocab_size"], (1, 70))
    first, _ = random_pair(TWO_LAYERS, seed=21)
    first = steps.compile_model(first, ks=(1,), freeze=False)
    assert generate(first, ids, max_new_tokens=20) == generate(random_pair(TWO_LAYERS, seed=21)[0], ids, max_new_tokens=20)
    assert (first.steps.fn.compiled, first.steps.fn.loaded) == (1, 0)

    later, _ = random_pair(TWO_LAYERS, seed=22)
    later = steps.compile_model(later, ks=(1,), freeze=False)
    eager, _ = random_pair(TWO_LAYERS, seed=22)
    assert generate(later, long, max_new_tokens=80) == generate(eager, long, max_new_tokens=80)   # capacity 64 -> 256
    assert (later.steps.fn.compiled, later.steps.fn.loaded) == (0, 1)

    other, _ = random_pair(dict(TWO_LAYERS, intermediate_size=80), seed=22)
    other = steps.compile_model(other, ks=(1,), freeze=False)
    assert other.steps.fn.path((1, False), 1) != later.steps.fn.path((1, False), 1)


@needs_compiler
def test_guards_are_checked_once_per_argument_layout(monkeypatch, tmp_path):
    """A saved graph's guards cost about a tenth of a small model's step, so SavedGraphs checks them once
    for each layout of the arguments (shapes of the tokens and every state buffer) and then calls the graph
    directly: a second generation checks nothing, a longer prompt (another KV capacity) or another batch
    size is checked again, and every output stays eager's."""
    from torch._dynamo.aot_compile import AOTCompiledFunction
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    checks = []
    check = AOTCompiledFunction.guard_check
    monkeypatch.setattr(AOTCompiledFunction, "guard_check", lambda self, *a, **kw: checks.append(1) or check(self, *a, **kw))
    model, _ = random_pair(TWO_LAYERS, seed=25)
    eager, _ = random_pair(TWO_LAYERS, seed=25)
    model = steps.compile_model(model, ks=(1,), freeze=False)
    ids, long = torch.tensor([[5, 1, 7]]), torch.randint(0, SMALL["vocab_size"], (1, 70))
    assert generate(model, ids, max_new_tokens=12) == generate(eager, ids, max_new_tokens=12)
    assert len(checks) == 1                                          # the first decode step, capacity 64
    assert generate(model, ids, max_new_tokens=12) == generate(eager, ids, max_new_tokens=12)
    assert len(checks) == 1                                          # same layout: trusted
    assert generate(model, long, max_new_tokens=20) == generate(eager, long, max_new_tokens=20)
    assert len(checks) == 2                                          # capacity 128: checked once more
    pair = torch.tensor([[5, 1, 7], [2, 2, 2]])
    state, eager_state = State(model, capacity=16), State(eager, capacity=16)
    with torch.inference_mode():
        model(pair, state), eager(pair, eager_state)
        got, want = model(torch.tensor([[3], [4]]), state), eager(torch.tensor([[3], [4]]), eager_state)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert len(checks) == 3 and len(model.steps.fn.trusted) == 3  # batch 2: its own graph, checked once


@needs_compiler
def test_a_saved_graph_that_no_longer_fits_is_compiled_again(monkeypatch, tmp_path):
    """Should a file be found for a model it does not fit (every shape forced onto one file here), its
    guards refuse it and the pass compiles afresh: the output stays eager's."""
    from qwen.compiled.saved import SavedGraphs
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setattr(SavedGraphs, "path", lambda self, variant, batch: tmp_path / "one.graph")
    ids = torch.tensor([[5, 1, 7]])
    for seed, cfg in ((23, TWO_LAYERS), (24, dict(TWO_LAYERS, intermediate_size=80))):
        model, _ = random_pair(cfg, seed=seed)
        model = steps.compile_model(model, ks=(1,), freeze=False)
        assert generate(model, ids, max_new_tokens=12) == generate(random_pair(cfg, seed=seed)[0], ids, max_new_tokens=12)
    assert model.steps.enabled and (model.steps.fn.loaded, model.steps.fn.compiled) == (1, 1)


@needs_compiler
@pytest.mark.parametrize("draft_vocab", ["a subset", "every token"])
def test_a_wide_model_streaming_its_weights_decodes_as_eager_does(monkeypatch, tmp_path, draft_vocab):
    """Compiled for real (one layer at the 0.8B width): plain and speculative decoding, both rollbacks,
    give eager greedy decoding's tokens, every pass compiled and kept, nothing frozen. The head's graphs
    also score the draft, as eager scoring does: over its FR-Spec vocabulary, or over every token from
    the output layer's own streamed rows (shared, not copied)."""
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setenv("QWEN_COMPILE_WORKERS", "1")
    wide, _ = random_pair(dict(SMALL, hidden_size=host.WIDE_HIDDEN, num_hidden_layers=1), seed=20)
    as_checkpoint(wide)
    head = as_checkpoint(MTP(wide.cfg).eval().requires_grad_(False))
    if draft_vocab == "a subset":
        head.set_draft_vocab(list(range(3, wide.cfg.vocab_size, 2)), wide.lm_head)
    ids = prompts(wide.cfg.vocab_size, n=1, seed=4)[0]
    want = generate(wide, ids, max_new_tokens=12)
    T, hidden = 3, torch.randn(1, 3, wide.cfg.hidden_size)
    cache = AttentionState()
    eager_out = head(wide.embed_tokens(ids[:, :T]), hidden, 0, cache)[:, 1]                 # (1, H)
    eager_scores = head.draft_logits(eager_out, wide.lm_head)[0]                          # (1, V')
    report = warmup.warm_up(wide, head, ks=(2,), rollbacks=("select", "recompute"), keep_if_faster=False)
    wide, head = report["model"], report["head"]
    assert report["status"].phase is Phase.COMPILED and wide.steps.strategy is steps.Strategy.STREAMED
    assert wide.steps.ready == {(1, False), (3, True), (3, False)}
    assert head.steps.ready == {(1, False), (3, False)}
    cache.truncate(0)
    logits, cols, out = head.draft(wide, hidden, ids[:, :T], 0, cache, row=1)              # the compiled pass
    if draft_vocab == "a subset":
        assert torch.equal(cols, head.draft_vocab) and logits.shape == eager_scores.shape
    else:
        assert cols is None and head.steps.fn.owners == (head.eager, wide.lm_head)     # the output layer's own rows
        assert logits.shape == (1, wide.cfg.vocab_size)
    torch.testing.assert_close(out[:, 0], eager_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits, eager_scores, atol=1e-4, rtol=1e-4)
    scored = head.scored_pass(wide.embed_tokens(ids[:, :T]), hidden, 0, cache)[1]          # (1, T, V')
    assert scored is not None and torch.equal(scored[:, 1], logits)    # it came from the graph, not eagerly
    assert generate(wide, ids, max_new_tokens=12) == want
    for rollback in ("select", "recompute"):
        scripted = ScriptedHead(head, ids[0].tolist() + want, 0.6, seed=5)
        assert generate_mtp(wide, scripted, ids, 12, k=2, rollback=rollback)[0] == want
