"""The compiled engine (qwen.compile): the same tokens and states as eager, no recompiles, and an eager
fallback with its reason when compiling is impossible. Compiles only tiny models (minutes on 2 cores
otherwise); eager is the reference throughout."""
import threading

import pytest
import torch

from qwen.compiled import Phase, Status, Why, host, internals, saved, steps, warmup
from qwen.cache import AttentionState, State
from qwen.model import Model
from qwen.mtp import MTP, generate_mtp, lengths_for
from qwen.sample import generate
from qwen.scripted import ScriptedHead
from qwen.weights import find_model
from reference import SMALL
from test_mtp import assert_same_state, prompts, random_pair, verify_then_roll_back

pytestmark = pytest.mark.compile               # the whole module: see pytest.ini
needs_compiler = pytest.mark.skipif(host.compiler_missing() is not None, reason="no C++ compiler")


class Compiled:
    """What a stand-in for torch.compile returns: a callable whose ahead-of-time compile (saved.py) is itself."""

    def __init__(self, run):
        self.run = run

    def __call__(self, *args):
        return self.run(*args)

    def aot_compile(self, example_inputs):
        return self


@pytest.fixture
def compiler(monkeypatch, tmp_path):
    """compiler(wrap): torch.compile(fn, ...) returns wrap(fn) from now on (to run as the compiled graph
    would); a graph cache of this test's own, so that no real graph saved earlier is loaded instead.
    -> the names of the functions torch.compile was asked for, in order"""
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    asked = []

    def use(wrap):
        monkeypatch.setattr(torch, "compile", lambda fn, **options: asked.append(fn.__name__) or Compiled(wrap(fn)))
        return asked
    return use


def crashing(message):
    """A compiler whose compiled functions raise on their first call, as a broken compiler does."""
    def wrap(fn):
        def compiled(*args):
            raise RuntimeError(message)
        return compiled
    return wrap


def corrupting(arity, corrupt):
    """A compiler that runs and computes something wrong: every result of `arity` values goes through corrupt(*out)."""
    def wrap(fn):
        def compiled(*args):
            out = fn(*args)
            return corrupt(*out) if isinstance(out, tuple) and len(out) == arity else out
        return compiled
    return wrap


def eager(fn):
    """A compiler whose compiled function is the eager function itself."""
    return fn


COMPILED_KS = (1, 3)


def graphs_compiled():
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.fixture(scope="module")
def compiled_pair():
    """A tiny random model and head, compiled for k = 1 and 3 and both rollbacks, beside an eager copy.
    (k = 2, the app's, is compiled and checked on the embedded model in test_compile_saved.py: every graph
    compiled here is a cold C++ build, minutes of the suite on 2 cores.)"""
    model, head = random_pair("small", seed=11)
    eager_model, eager_head = random_pair("small", seed=11)
    report = warmup.warm_up(model, head, ks=COMPILED_KS, rollbacks=("select", "recompute"), keep_if_faster=False,
                        freeze=True)                  # frozen (as wide models are); the embedded model's test is not
    model, head = report["model"], report["head"]
    assert report["status"] == Status(Phase.COMPILED), report
    return model, head, eager_model, eager_head


@needs_compiler
def test_compiled_greedy_output_equals_eager_on_a_random_model(compiled_pair):
    model, _, eager, _ = compiled_pair
    for ids in prompts(model.cfg.vocab_size, n=3, seed=1):
        assert generate(model, ids, max_new_tokens=40) == generate(eager, ids, max_new_tokens=40)


@needs_compiler
@pytest.mark.parametrize("rollback", ["select", "recompute"])
@pytest.mark.parametrize("k", COMPILED_KS)
def test_speculative_equals_plain_under_compile(compiled_pair, rollback, k):
    model, head, eager, _ = compiled_pair
    for ids in prompts(model.cfg.vocab_size, n=2, seed=k):
        plain = generate(eager, ids, max_new_tokens=30)
        for rate in (0.5, 0.9):                                      # rejections and long accepted runs
            scripted = ScriptedHead(head, ids[0].tolist() + plain, rate, seed=k)
            assert generate_mtp(model, scripted, ids, max_new_tokens=30, k=k, rollback=rollback)[0] == plain
        assert generate_mtp(model, head, ids, max_new_tokens=30, k=k, rollback=rollback)[0] == plain
        for sampling in (dict(temperature=0.8, seed=k), dict(temperature=1.1, top_k=9, seed=k + 1)):
            sampled = generate(eager, ids, max_new_tokens=30, **sampling)           # shared noise: the same text
            assert generate_mtp(model, head, ids, max_new_tokens=30, k=k, rollback=rollback, **sampling)[0] == sampled


@needs_compiler
@pytest.mark.parametrize("k", [1, 3])
def test_a_greedy_select_round_of_a_small_model_is_one_compiled_call(compiled_pair, monkeypatch, k):
    model, head, eager, _ = compiled_pair
    calls = {"round": 0, "sampled": 0, "step": 0, "head": 0}
    for name, part in (("round", head.rounds), ("sampled", head.sampled_rounds), ("step", model.steps),
                       ("head", head.steps)):
        monkeypatch.setattr(part, "fn", lambda *a, _fn=part.fn, _name=name: calls.__setitem__(_name, calls[_name] + 1) or _fn(*a))
    ids = torch.tensor([[5, 1, 7, 2, 8, 3]])             # 6 tokens: the head's prefill pass is no compiled T
    tokens, rounds, _ = generate_mtp(model, head, ids, max_new_tokens=30, k=k)
    assert tokens == generate(eager, ids, max_new_tokens=30)
    assert head.rounds.status.phase is Phase.COMPILED and calls == {"round": rounds, "sampled": 0, "step": 0, "head": 0}
    calls.update(round=0)                                # shared noise: the sampled round graph, one call a round
    tokens, rounds, _ = generate_mtp(model, head, ids, max_new_tokens=30, k=k, temperature=0.9, seed=5)
    assert tokens == generate(eager, ids, max_new_tokens=30, temperature=0.9, seed=5)
    assert calls == {"round": 0, "sampled": rounds, "step": 0, "head": 0}
    calls.update(sampled=0)                              # top-k: filters run step by step, through the step graphs
    tokens, rounds, _ = generate_mtp(model, head, ids, max_new_tokens=30, k=k, temperature=0.9, seed=5, top_k=7)
    assert tokens == generate(eager, ids, max_new_tokens=30, temperature=0.9, seed=5, top_k=7)
    assert calls["round"] == calls["sampled"] == 0 and calls["step"] > 0


@needs_compiler
@pytest.mark.parametrize("rollback", ["select", "recompute"])
def test_select_and_restore_under_compile_leave_the_state_plain_decoding_has(compiled_pair, rollback):
    model, _, eager, _ = compiled_pair
    prefix, more = [3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5]              # a verify pass of 4 tokens (k = 3)
    state = verify_then_roll_back(model, prefix, more, 2, rollback)  # compiled: (4, keep) / (4, no keep)
    with torch.inference_mode():
        want = State(eager)
        eager(torch.tensor([prefix + more[:2]]), want)
    assert_same_state(state, want, atol=1e-5)


@needs_compiler
def test_no_recompiles_across_generations_positions_and_kv_growth(compiled_pair):
    model, head, _, _ = compiled_pair
    ids = torch.tensor([[1, 2, 3]])
    generate_mtp(model, head, ids, max_new_tokens=20, k=3)
    before = graphs_compiled()
    long = torch.randint(0, model.cfg.vocab_size, (1, 70))           # another prompt: KV capacity 64 -> 256
    generate(model, long, max_new_tokens=100)
    generate_mtp(model, head, long, max_new_tokens=100, k=3)
    assert graphs_compiled() == before


@needs_compiler
def test_auto_draft_lengths_run_on_the_compiled_graphs_and_compile_nothing_per_round(compiled_pair):
    model, head, eager_model, _ = compiled_pair
    ids = torch.tensor([[4, 5, 6, 7]])
    lengths_for(model, head, max(COMPILED_KS))                       # each length timed once, on the views
    before = graphs_compiled()
    plain = generate(eager_model, ids, max_new_tokens=40)
    assert generate_mtp(model, head, ids, max_new_tokens=40, k="auto", max_k=max(COMPILED_KS))[0] == plain
    assert graphs_compiled() == before


TWO_LAYERS = dict(SMALL, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])


def test_small_models_store_each_weight_as_the_transpose_it_is_multiplied_by():
    model, head = random_pair("small", seed=17)
    model.lm_head.weight = model.embed_tokens.weight                    # tied, as in the embedded model
    before = {name: p.clone() for name, p in list(model.named_parameters()) + list(head.named_parameters())}
    ids = torch.tensor([[5, 9, 2, 7, 1]])
    with torch.inference_mode():
        want = model(ids, State(model))
    model = steps.compile_model(model, ks=(2,))                                    # lazy: lays out, compiles nothing
    head = steps.compile_head(head, ks=(2,))
    linears = [m for mod in (model, head) for m in mod.modules() if isinstance(m, torch.nn.Linear)]
    untied = [m for m in linears if m.weight is not model.embed_tokens.weight]
    assert untied and all(m.weight.stride() == (1, m.weight.shape[0]) for m in untied)        # (in, out) in memory
    # the table the embedding shares stays row-major: a token's row contiguous (batch invariance, docs/design.md)
    assert model.lm_head.weight is model.embed_tokens.weight and model.embed_tokens.weight.stride()[1] == 1
    after = dict(list(model.named_parameters()) + list(head.named_parameters()))
    assert all(torch.equal(after[name], w) for name, w in before.items())                     # the same values
    with torch.inference_mode():
        assert torch.allclose(model(ids, State(model)), want, atol=1e-5)


def test_the_compile_cache_is_kept_apart_per_cpu_capability(monkeypatch, tmp_path):
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    avx2 = host.cache_dir()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert avx2 != host.cache_dir() and avx2.startswith(str(tmp_path)) and avx2.endswith("avx2")


def test_inductor_writes_into_that_cache_unless_the_user_named_a_folder(monkeypatch, tmp_path):
    import torch._dynamo  # noqa: F401  (importing it writes inductor's default folder into the environment)
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir, default_cache_dir
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    internals.use_cache_dir(host.cache_dir())
    assert inductor_cache_dir() == host.cache_dir() and host.cache_dir().startswith(str(tmp_path))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    internals.use_cache_dir(host.cache_dir())
    assert inductor_cache_dir() == str(tmp_path / "mine")


def test_on_cuda_every_state_buffer_is_a_static_address_for_cuda_graphs(monkeypatch):
    """The CUDA path's CPU-side logic (no GPU here): CUDA graphs through mode "reduce-overhead", and
    every buffer a pass writes in place (KV, conv window, memory, step slots; a head's KV) marked as a
    static address: inductor skips CUDA graphs for a graph that mutates any other input. The pass
    itself runs eagerly here and must compute what the model's own step does."""
    options = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: options.append(kw) or fn)
    model, head = random_pair(TWO_LAYERS, seed=31)
    step = steps.compile_graphs(saved.model_step, (model,), "model", "cuda", steps.Strategy.CUDA)
    ids, nxt = torch.tensor([[3, 1, 4]]), torch.tensor([[2]])
    mine, eager = State(model), State(model)
    for state in (mine, eager):
        model.hidden(ids, state)
    logits, _ = step((1, False), nxt, mine.begin_pass(nxt), mine)
    torch.testing.assert_close(logits, model.step(nxt, eager.begin_pass(nxt), eager)[0])
    assert options == [{"mode": "reduce-overhead", "fullgraph": True}]
    written = list(saved.state_buffers([mine]))
    assert len(written) == 2 + 6                  # the attention layer's k, v; the DeltaNet layer's six
    assert all(getattr(t, "_dynamo_static_input_type", None) == "unguarded" for t in written)
    cache = AttentionState()
    head(model.embed_tokens(ids), torch.zeros(1, 3, model.cfg.hidden_size), 0, cache)
    assert [t.data_ptr() for t in saved.state_buffers([cache])] == [cache.k.data_ptr(), cache.v.data_ptr()]


def test_the_eager_fallback_is_taken_when_compiling_fails(compiler):
    compiler(crashing("simulated compiler crash"))
    model, head = random_pair("small", seed=12)
    eager, _ = random_pair("small", seed=12)
    report = warmup.warm_up(model, head, ks=(2,))
    model, head = report["model"], report["head"]
    assert report["status"].why is Why.FAILED and "simulated compiler crash" in report["status"].detail
    assert not model.steps.enabled and not head.steps.enabled and not head.rounds.enabled
    ids = torch.tensor([[4, 8, 15, 16, 23, 42]])
    assert generate_mtp(model, head, ids, max_new_tokens=20, k=2)[0] == generate(eager, ids, max_new_tokens=20)


def test_the_eager_fallback_is_taken_when_the_ahead_of_time_compile_fails(monkeypatch, tmp_path):
    """The same inside saved.py (the path small models take on CPU): torch's aot_compile failing."""
    class Failing:
        def __init__(self, fn, **options):
            pass

        def aot_compile(self, example_inputs):
            raise RuntimeError("simulated ahead-of-time failure")
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setattr(torch, "compile", Failing)                   # as saved.py calls it
    model, head = random_pair(TWO_LAYERS, seed=27)
    eager, _ = random_pair(TWO_LAYERS, seed=27)
    report = warmup.warm_up(model, head, ks=(1,))
    model, head = report["model"], report["head"]
    assert report["status"].why is Why.FAILED and "simulated ahead-of-time failure" in report["status"].detail
    ids = torch.tensor([[4, 8, 15, 16]])
    assert generate_mtp(model, head, ids, max_new_tokens=20, k=1)[0] == generate(eager, ids, max_new_tokens=20)


def test_a_miscompiled_step_is_caught_at_warm_up_and_never_used(compiler):
    """A compiler that runs but computes wrong logits (as inductor's AVX2 kernels did on this project's
    machines) must leave the model eager, saying why, and generation exact."""
    wrong_logits = lambda logits, hidden: (logits + 0.5 * logits.abs().max(), hidden)     # a step's outputs
    compiler(corrupting(2, wrong_logits))
    model, head = random_pair("small", seed=17)
    eager, _ = random_pair("small", seed=17)
    report = warmup.warm_up(model, head, ks=(2,), keep_if_faster=False)
    model, head = report["model"], report["head"]
    assert report["status"].why is Why.WRONG and report["status"].detail.startswith("the decode step (max |logit"), report
    assert not model.steps.enabled and not head.steps.enabled and not head.rounds.enabled
    ids = torch.tensor([[4, 8, 15, 16, 23, 42]])
    assert generate_mtp(model, head, ids, max_new_tokens=20, k=2)[0] == generate(eager, ids, max_new_tokens=20)


def test_a_wrong_round_graph_is_dropped_and_the_checked_steps_kept(compiler):
    """A round graph that emits another token than plain decoding would goes; rounds then run step by
    step through the compiled steps, which agreed with eager."""
    wrong_token = lambda drafts, n, nxt, guess, out: (drafts, n, (nxt + 1) % 61, guess, out)  # greedy_round's
    compiler(corrupting(5, wrong_token))
    model, head = random_pair("small", seed=18)
    eager, _ = random_pair("small", seed=18)
    report = warmup.warm_up(model, head, ks=(2,), keep_if_faster=False)
    model, head = report["model"], report["head"]
    assert report["status"].phase is Phase.COMPILED and model.steps.enabled and head.steps.enabled
    assert head.rounds.status.why is Why.WRONG and "greedy round with k=2" in head.rounds.status.detail
    ids = torch.tensor([[4, 8, 15, 16, 23, 42]])
    assert generate_mtp(model, head, ids, max_new_tokens=20, k=2)[0] == generate(eager, ids, max_new_tokens=20)


def test_a_compile_failure_during_generation_falls_back_to_eager(compiler):
    compiler(crashing("simulated failure on first use"))
    model, head = random_pair("small", seed=13)
    eager, _ = random_pair("small", seed=13)
    model = steps.compile_model(model, ks=(2,))                                 # lazy: nothing compiled before the first call
    ids = torch.tensor([[7, 7, 7]])
    assert generate(model, ids, max_new_tokens=10) == generate(eager, ids, max_new_tokens=10)
    assert model.steps.status.why is Why.FAILED and "simulated failure" in model.steps.status.detail


def test_no_compiler_means_eager_with_the_reason(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(host.shutil, "which", lambda name: None)
    model, head = random_pair("small", seed=14)
    report = warmup.warm_up(model, head, ks=(1,))
    model, head = report["model"], report["head"]
    assert report["status"] == Status(Phase.EAGER, Why.NO_COMPILER)
    assert model.steps.lookup(1) is None and head.steps.lookup(1) is None


def test_while_warming_up_other_threads_stay_eager():
    passes = steps.CompiledSteps(lambda *a: "compiled", {(1, False), (3, True)})
    assert passes.lookup(1) is not None and passes.lookup(2) is None and passes.lookup(3) is None
    assert passes.lookup(3, keep=True) is not None
    passes.warming_thread = threading.get_ident() + 1                 # someone else is compiling
    assert passes.lookup(1) is None
    passes.warming_thread = threading.get_ident()                     # we are
    assert passes.lookup(1)() == "compiled"


@pytest.mark.parametrize("capability, native", [("AVX2", False), ("AVX2", True), ("AVX512", False), ("AVX512", True)])
def test_float32_on_every_cpu_and_bfloat16_on_a_gpu(monkeypatch, capability, native):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    dtype, reason = host.default_dtype("cpu")
    assert dtype == torch.float32 and capability in reason          # bfloat16 passes part from plain decoding
    assert host.default_dtype("cpu", hidden_size=1024)[0] == torch.float32
    assert host.default_dtype("cpu", hidden_size=192) == (torch.float32, "a small model (hidden size 192) on CPU")
    assert host.default_dtype("cuda")[0] == host.default_dtype("cuda", hidden_size=1024)[0] == torch.bfloat16
    # a small model stays float32 on a GPU too: in bfloat16 the embedded model's greedy race on an H200 parted
    # from plain decoding (docs/benchmarks.md, 2026-12-04 GPU check); in float32 every check passed
    assert host.default_dtype("cuda", hidden_size=192) == (torch.float32, "a small model (hidden size 192) on a GPU")


def test_compile_variants_cover_decode_verify_and_catch_up():
    main, head = steps.variants_for((1, 3), rollbacks=("select", "recompute"))
    assert main == {(1, False), (2, True), (2, False), (4, True), (4, False)}
    assert head == {(1, False), (2, False), (4, False)}
    main, head = steps.variants_for((2,), one_token=False)
    assert main == {(3, True)} and head == {(3, False)}


def test_warm_up_keeps_each_compiled_pass_only_where_it_is_faster(compiler):
    """A pass whose compiled graph is not faster runs eagerly; the others stay compiled, and the output
    is still plain decoding's. (Timings given: the real ones depend on the host.)"""
    compiler(eager)
    measured = {"decode step": 0.9, "greedy round with k=2": 1.3, "sampled round with k=2": 0.95,
                "verify of 3 tokens (keeping step states)": 1.6,
                "head pass of 1 token": 1.2, "head pass of 3 tokens": 1.0}
    timer = lambda model, head, ids, passes: {(part, v): measured[warmup.pass_name(part, v)] for part, v in passes}
    model, head = random_pair("small", seed=19)
    plain_model, _ = random_pair("small", seed=19)
    report = warmup.warm_up(model, head, ks=(2,), timer=timer)
    model, head = report["model"], report["head"]
    assert report["status"].phase is Phase.COMPILED and report["speedups"] == measured and report["step_speedup"] == 0.9
    assert model.steps.lookup(1) is None and model.steps.lookup(3, keep=True) is not None
    assert head.steps.lookup(1) is not None and head.steps.lookup(3) is None
    assert head.rounds.lookup(3, keep=True) is not None and head.sampled_rounds.lookup(3, keep=True) is None
    assert model.steps.eager_passes == {(1, False): Status(Phase.EAGER, Why.SLOWER, "0.90x")}
    ids = torch.tensor([[5, 6, 7]])
    assert generate_mtp(model, head, ids, max_new_tokens=12, k=2)[0] == generate(plain_model, ids, max_new_tokens=12)
    sampled = dict(temperature=0.7, seed=4)          # its round graph dropped: step by step, the same text
    assert generate_mtp(model, head, ids, max_new_tokens=12, k=2, **sampled)[0] == \
        generate(plain_model, ids, max_new_tokens=12, **sampled)

    measured.update({"verify of 3 tokens (keeping step states)": 0.8})            # nothing of the model gains
    model, head = random_pair("small", seed=19)
    report = warmup.warm_up(model, head, ks=(2,), timer=timer)
    model, head = report["model"], report["head"]
    assert report["status"] == Status(Phase.EAGER, Why.SLOWER, "0.80x"), report["status"]
    assert not model.steps.enabled and head.steps.lookup(1) is not None


def test_the_passes_plain_and_greedy_decoding_need_serve_first_while_the_rest_compile(compiler):
    """With round graphs, warm_up readies the decode step and the rounds first; other threads use them
    while the step graphs for the trace, sampling and `recompute` are still compiling."""
    from demo import frame, models
    from demo.i18n import t
    compiler(eager)
    seen, app = [], []

    def time_passes(model, head, ids, passes):      # what another thread may use while these are timed
        app.append((loaded.compile_status(), frame.compile_settled(loaded), frame.compile_note(loaded, "English")))
        other = {}
        look = lambda: other.update(decode=model.steps.lookup(1) is not None,
                                    verify=model.steps.lookup(3, keep=True) is not None,
                                    head=head.steps.lookup(1) is not None,
                                    round=head.rounds.lookup(3, keep=True) is not None)
        thread = threading.Thread(target=look)
        thread.start(), thread.join()
        seen.append(([warmup.pass_name(part, v) for part, v in passes], other))
        return {(part, v): 2.0 for part, v in passes}
    model, head = random_pair("small", seed=20)
    loaded = models.Loaded("test", "", model, head, None, torch.float32, 0.0)
    model = steps.compile_model(model, ks=(2,))
    head = steps.compile_head(head, ks=(2,), model=model)
    loaded.views = model, head                              # as models.start_compiling does
    report = warmup.warm_up(model, head, ks=(2,), on_ready=lambda *views: setattr(loaded, "serving", views),
                            timer=time_passes)
    model, head = report["model"], report["head"]
    assert app[0][:2] == (Status(Phase.COMPILING), False)
    assert app[1] == (Status(Phase.COMPILING_MORE), False, t("model_compiled_more"))
    assert loaded.compile_status().phase is Phase.COMPILED and frame.compile_settled(loaded)
    assert [names for names, _ in seen] == [
        ["decode step", "greedy round with k=2", "sampled round with k=2"],
        ["verify of 3 tokens (keeping step states)", "head pass of 1 token", "head pass of 3 tokens"]]
    assert seen[0][1] == dict(decode=False, verify=False, head=False, round=False)
    assert seen[1][1] == dict(decode=True, verify=False, head=False, round=True)
    assert report["status"].phase is Phase.COMPILED and report["ready_seconds"] is not None
    assert model.steps.lookup(3, keep=True) is not None and head.steps.lookup(1) is not None
    assert loaded.engine() == (model, head)                 # serving since the first phase


def test_a_caller_that_will_not_sample_or_trace_warms_up_only_what_greedy_decoding_uses(compiler):
    calls = []                                   # the function behind every call into a "compiled" one

    def recording(fn):
        return lambda *args: calls.append(fn.__name__) or fn(*args)
    asked = compiler(recording)
    timed = []
    timer = lambda model, head, ids, passes: timed.extend(
        warmup.pass_name(part, v) for part, v in passes) or {(part, v): 2.0 for part, v in passes}
    model, head = random_pair("small", seed=21)
    report = warmup.warm_up(model, head, ks=(2,), only_greedy=True, timer=timer)
    model, head = report["model"], report["head"]
    assert timed == ["decode step", "greedy round with k=2"] and report["status"].phase is Phase.COMPILED
    assert not head.steps.ready and head.steps.lookup(1) is None and head.steps.lookup(3) is None
    assert model.steps.lookup(3, keep=True) is None and model.steps.lookup(1) is not None
    # a 3-token prompt prefills the head with T = 3: a pass that was skipped must run eagerly, not
    # compile in the middle of the generation (it did: the command line's first run stalled 11 s)
    prompt = torch.tensor([[5, 9, 2]])
    want = generate(model, prompt, max_new_tokens=12)
    calls.clear()
    compiled_before = list(asked)
    assert generate_mtp(model, head, prompt, max_new_tokens=12, k=2)[0] == want
    assert asked == compiled_before and "round_of" in calls                      # nothing compiled meanwhile


@pytest.mark.parametrize("works", [True, False])
def test_the_app_compiles_in_the_background_and_says_so(monkeypatch, compiler, works):
    from demo import frame, models
    # the eager function itself standing in for a compiled one, or a compiler that crashes
    compiler(eager if works else crashing("simulated"))
    # the stand-in must count as faster (the app's warm-up times with warmup.time_passes)
    monkeypatch.setattr(warmup, "time_passes", lambda model, head, ids, passes: {p: 2.0 for p in passes})
    model, head = random_pair("small", seed=15)
    loaded = models.Loaded("test", "", model, head, None, torch.float32, 0.0)
    assert frame.compile_note(loaded, "English") == ""                  # nothing asked: no note
    thread = models.start_compiling(loaded, ks=(1,))
    thread.join(timeout=120)
    if works:
        assert loaded.compile_status().phase is Phase.COMPILED and "compiled" in frame.compile_note(loaded, "English")
        assert frame.compile_note(loaded, "中文").startswith(" · 已编译：")              # and what that means
        assert loaded.engine() == loaded.views and loaded.engine()[0] is not model      # the views serve
    else:
        assert loaded.compile_status().why is Why.FAILED
        assert "simulated" in frame.compile_note(loaded, "English")
        assert loaded.engine() == (model, head)                                          # the eager modules serve
    assert frame.compile_settled(loaded)


def test_the_app_reads_qwen_compile_and_qwen_dtype(monkeypatch):
    from demo import models
    for value, want in (("0", False), ("off", False), ("1", True), ("", True)):
        monkeypatch.setenv("QWEN_COMPILE", value)
        assert models.compile_wanted() is want
    monkeypatch.setenv("QWEN_DTYPE", "bfloat16")
    assert models.checkpoint_dtype(find_model()) == (torch.bfloat16, "QWEN_DTYPE")
    monkeypatch.delenv("QWEN_DTYPE")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)      # native bfloat16 ...
    dtype, reason = models.checkpoint_dtype(find_model())                 # ... but the embedded model is small
    assert dtype == torch.float32 and "hidden size 192" in reason


def test_compiling_makes_views_and_leaves_the_modules_plain(compiler):
    """compile_model / compile_head / compile_round wrap the modules from outside: the modules gain no
    attribute, the views read and write the modules' own, and decode as the modules do."""
    compiler(eager)
    model, head = random_pair("small", seed=22)
    before = set(vars(model)), set(vars(head))
    fast = steps.compile_model(model, ks=(2,))
    fast_head = steps.compile_head(head, ks=(2,), model=fast)
    steps.compile_round(fast, fast_head, ks=(2,))
    assert (set(vars(model)), set(vars(head))) == before
    assert isinstance(fast, Model) and isinstance(fast_head, MTP) and (fast.eager, fast_head.eager) == (model, head)
    fast_head.draft_vocab = torch.arange(5)                       # a write through the view lands on the module
    assert head.draft_vocab is fast_head.draft_vocab
    fast_head.draft_vocab = None
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.inference_mode():
        assert generate_mtp(fast, fast_head, ids, max_new_tokens=12, k=2)[0] == generate(model, ids, max_new_tokens=12)
    with pytest.raises(TypeError, match="compile_head"):
        steps.compile_round(fast, head, ks=(2,))
