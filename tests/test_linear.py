"""qwen.linear: the weight copies compiled CPU graphs (streamed) and eager passes (packed) multiply by, checked
against nn.functional.linear."""
import pytest
import torch
import torch.nn.functional as F

from qwen.compiled import Phase, host, steps, warmup
from qwen import linear
from qwen.cache import State
from qwen.linear import Linear, rows_matmul, stream_dtype, streamed_copy
from qwen.model import Model
from qwen.mtp import MTP
from qwen.weights import find_model

needs_compiler = pytest.mark.skipif(host.compiler_missing() is not None, reason="no C++ compiler")


@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (2, 2), (4,)])
def test_rows_matmul_is_linear(shape):
    torch.manual_seed(0)
    x, w = torch.randn(*shape, 48), torch.randn(40, 48)
    assert torch.allclose(rows_matmul(x, w), F.linear(x, w), atol=1e-5)
    w16 = w.bfloat16()                                  # a bfloat16 copy: the same products as its float32 values
    assert torch.allclose(rows_matmul(x, w16), F.linear(x, w16.float()), atol=1e-5)
    got = rows_matmul(x.bfloat16(), w16)                # a bfloat16 model: bfloat16 out, as F.linear gives
    assert got.dtype == torch.bfloat16 and torch.allclose(got.float(), F.linear(x.bfloat16(), w16).float(), rtol=2e-2, atol=2e-2)


def test_the_copy_is_bfloat16_only_where_that_is_exact():
    exact = torch.randn(8, 16).bfloat16().float()                          # a bf16 checkpoint loaded as float32
    assert stream_dtype(exact) == torch.bfloat16
    assert torch.equal(streamed_copy(exact).float(), exact)
    inexact = torch.randn(8, 16)
    assert stream_dtype(inexact) == torch.float32 and torch.equal(streamed_copy(inexact), inexact)
    transposed = exact.t().contiguous().t()                                 # as lay_out_transposed stores it
    assert streamed_copy(transposed).is_contiguous()                        # the copy is row-major


@needs_compiler
@pytest.mark.compile
def test_compiled_linear_multiplies_by_the_streamed_copy(monkeypatch):
    torch.manual_seed(1)
    layer = Linear(64, 96)
    layer.weight.data = layer.weight.data.bfloat16().float()
    x = torch.randn(1, 3, 64)
    with torch.inference_mode():
        want = F.linear(x, layer.weight)
        assert torch.equal(layer(x), want)                  # eager, without a copy: nn.Linear
        steps.stream_weights([layer])
        assert layer.streamed.dtype == torch.bfloat16
        assert torch.equal(layer(x), want)                  # eager, with one: still the BLAS
        calls = []
        monkeypatch.setattr(linear, "rows_matmul", lambda *a: calls.append(1) or rows_matmul(*a))
        got = torch.compile(layer, fullgraph=True, backend="eager")(x)      # traced: the graph's path
    assert calls and torch.allclose(got, want, atol=1e-5)


def test_the_embedded_model_streams_every_weight_in_bfloat16_with_the_same_values():
    path = find_model()
    model = Model.from_pretrained(path)
    head = MTP.from_pretrained(model.cfg, path, lm_head=model.lm_head)
    assert steps.stream_weights([model, head]) == {torch.bfloat16}
    linears = [m for mod in (model, head) for m in mod.modules() if isinstance(m, Linear)]
    assert len(linears) > 60 and all(torch.equal(m.streamed.float(), m.weight) for m in linears)
    assert torch.equal(head.draft_streamed.float(), model.lm_head.weight[head.draft_vocab])   # the draft's rows
    assert all(not name.endswith("streamed") for name in model.state_dict())                 # nothing saved


@pytest.mark.parametrize("setting, streamed", [(None, True), ("0", False)])
def test_small_models_stream_their_weights_unless_qwen_stream_weights_is_0(monkeypatch, setting, streamed):
    from test_mtp import random_pair
    if setting is not None:
        monkeypatch.setenv("QWEN_STREAM_WEIGHTS", setting)
    model, head = random_pair("small", seed=3)
    steps.compile_model(model, ks=(2,))                 # lazy: prepares, compiles nothing
    steps.compile_head(head, ks=(2,), freeze=True)      # frozen graphs hold their own (packed) weights
    assert all((m.streamed is not None) == streamed for m in model.modules() if isinstance(m, Linear))
    assert all(m.streamed is None for m in head.modules() if isinstance(m, Linear))


packing = pytest.mark.skipif(linear.packing_missing() is not None, reason="this torch has no oneDNN packed linear")


@packing
def test_eager_passes_multiply_by_the_packed_copy_except_where_asked_not_to():
    import pickle
    torch.manual_seed(2)
    layer = Linear(64, 96)
    with torch.inference_mode():
        for x in (torch.randn(1, 1, 64), torch.randn(1, 3, 64), torch.randn(5, 64)):
            want = F.linear(x, layer.weight)
            assert linear.pack_weights([layer]) == 64 * 96 * 4 and layer.packed is not None
            assert torch.allclose(layer(x), want, atol=1e-5)               # oneDNN's product, the BLAS's values
            layer.packed = torch.ops.mkldnn._reorder_linear_weight(2 * layer.weight, 1)
            assert torch.allclose(layer(x), 2 * want, atol=1e-5)           # it is the packed copy that is read
            with linear.plain_weights():
                assert torch.equal(layer(x), want)                         # ... except within plain_weights
            linear.unpack_weights([layer])
            assert layer.packed is None and torch.equal(layer(x), want)
    linear.pack_weights([layer])
    x = torch.randn(1, 2, 64)
    assert torch.equal(layer(x), F.linear(x, layer.weight))                # autograd on: always the BLAS
    clone = pickle.loads(pickle.dumps(layer))                              # compile helpers get a pickled copy
    assert clone.packed is None and torch.equal(clone.weight, layer.weight)


@packing
def test_a_model_with_packed_weights_decodes_the_tokens_it_decodes_without():
    from qwen.mtp import generate_mtp
    from qwen.sample import generate
    from test_mtp import random_pair
    model, head = random_pair("small", seed=21)
    ids = torch.tensor([[3, 14, 15, 9, 2, 6]])
    want = generate(model, ids, max_new_tokens=24)
    with torch.inference_mode():
        plain_logits = model(ids, State(model))
        linear.pack_weights([model, head])
        assert all(m.packed is not None for mod in (model, head) for m in mod.modules() if isinstance(m, Linear))
        assert torch.allclose(model(ids, State(model)), plain_logits, rtol=1e-4, atol=1e-4)
    assert generate(model, ids, max_new_tokens=24) == want
    for k in (1, 2, 3):
        for rollback in ("select", "recompute"):
            assert generate_mtp(model, head, ids, 24, k=k, rollback=rollback)[0] == want, (k, rollback)


@packing
def test_a_wide_model_prepared_for_compiling_packs_its_weights_where_they_fit(monkeypatch):
    from reference import SMALL
    from test_mtp import random_pair
    wide = dict(SMALL, hidden_size=host.AUTOTUNE_HIDDEN, num_hidden_layers=1, vocab_size=64)

    def packed(model):
        return [m.packed is not None for m in model.modules() if isinstance(m, Linear)]
    model, _ = random_pair(wide, seed=23)
    steps.compile_model(model)                              # prepares (graphs compile on first use)
    assert packed(model) and all(packed(model))
    narrow, _ = random_pair("small", seed=23)
    steps.compile_model(narrow)                             # small models stream their weights instead
    assert not any(packed(narrow))
    model, _ = random_pair(wide, seed=23)
    monkeypatch.setattr(host, "memory_available", lambda: 10_000)
    steps.compile_model(model)
    assert not any(packed(model))                        # no room for the copies
    monkeypatch.undo()
    monkeypatch.setenv("QWEN_PACK_WEIGHTS", "0")
    steps.compile_model(model)
    assert not any(packed(model))                        # turned off


@packing
def test_warm_up_keeps_packed_weights_only_where_the_decode_step_is_faster_with_them(monkeypatch):
    from test_mtp import random_pair
    model, head = random_pair("small", seed=22)
    linears = [m for mod in (model, head) for m in mod.modules() if isinstance(m, Linear)]
    with torch.inference_mode():
        linear.pack_weights([model, head])
        assert warmup.packing_speedup(model, torch.tensor([[1, 2, 3, 4]]), repeats=3) > 0      # timed for real
        for speedup, keep_if_faster, kept in ((0.9, True, False), (0.9, False, True), (1.3, True, True)):
            linear.pack_weights([model, head])
            monkeypatch.setattr(warmup, "packing_speedup", lambda model, ids, repeats=5: speedup)
            report = {"speedups": {}}
            warmup._keep_packing_if_faster(model, head, report, 8, keep_if_faster)
            assert report["speedups"] == {"eager decode step, packed weights": speedup}
            assert all((m.packed is not None) == kept for m in linears), (speedup, keep_if_faster)


@packing
@pytest.mark.parametrize("decode_speedup, dropped", [(1.4, True), (0.9, False)])
def test_packed_weights_are_freed_once_the_one_token_passes_run_compiled(monkeypatch, decode_speedup, dropped):
    """A wide model whose decode step and draft pass win compiled no longer needs its packed eager copies
    (they serve prefill only): warm_up frees them. Where the decode step stays eager, they stay. Either
    way the tokens are plain greedy decoding's. (Compiling stood in by eager calls, timings stubbed.)"""
    from reference import SMALL
    from test_compile import eager_compiler
    from test_mtp import random_pair
    from qwen.mtp import generate_mtp
    from qwen.sample import generate
    wide = dict(SMALL, hidden_size=host.AUTOTUNE_HIDDEN, num_hidden_layers=1, vocab_size=64)
    model, head = random_pair(wide, seed=24)
    ids = torch.tensor([[5, 6, 7, 8]])
    want = generate(model, ids, max_new_tokens=10)
    monkeypatch.setattr(steps, "_compile", eager_compiler)
    monkeypatch.setattr(warmup, "packing_speedup", lambda model, ids, repeats=5: 1.3)
    monkeypatch.setattr(warmup, "_time_passes", lambda model, head, ids, passes: {
        (part, v): decode_speedup if (part.kind, v) == ("model", (1, False)) else 1.5 for part, v in passes})
    report = warmup.warm_up(model, head, ks=(2,), freeze=True)
    linears = [m for mod in (model, head) for m in mod.modules() if isinstance(m, Linear)]
    assert report["status"].phase is Phase.COMPILED and report["packed_weights_dropped"] == dropped
    assert all((m.packed is None) == dropped for m in linears)
    assert ((1, False) in model.compiled.ready) == dropped and (1, False) in head.compiled.ready
    assert generate_mtp(model, head, ids, max_new_tokens=10, k=2)[0] == want


@packing
def test_a_compiled_graph_does_not_depend_on_the_packed_copies():
    """Freeing or adding packed copies must not invalidate compiled graphs (they read the plain
    weights): dynamo guards on every attribute a graph reads, and a graph that read `packed` recompiled
    once the copies were freed (a frozen 0.8B graph: minutes, and another copy of the weights)."""
    torch._dynamo.reset()
    layer = Linear(32, 16).requires_grad_(False)
    linear.pack_weights([layer])
    frames = []

    def backend(gm, example_inputs):
        frames.append(gm)
        return gm.forward
    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    x = torch.randn(2, 32)
    with torch.inference_mode():
        assert torch.allclose(compiled(x), F.linear(x, layer.weight), atol=1e-5)
        linear.unpack_weights([layer])
        assert torch.allclose(compiled(x), F.linear(x, layer.weight), atol=1e-5)
        linear.pack_weights([layer])
        compiled(x)
    assert len(frames) == 1                              # compiled once, never again
