"""qwen.compiled.streamed and the choice of strategy: the Linear compiled CPU graphs multiply by, checked
against nn.functional.linear, and which hosts' models stream, freeze or use CUDA graphs."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.bench import as_checkpoint
from qwen.cache import State
from qwen.compiled.saved import head_run
from qwen.compiled import host, steps
from qwen.compiled.host import Strategy
from qwen.compiled.streamed import StreamedLinear, eager_weight, rows_matmul, stream_dtype, stream_weights, streamed_copy
from qwen.model import Model
from qwen.mtp import MTP
from qwen.weights import find_model
from reference import SMALL
from test_mtp import random_pair

WIDE = dict(SMALL, hidden_size=host.WIDE_HIDDEN, num_hidden_layers=1)


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


def test_inside_a_graph_the_layer_reads_its_rows_and_outside_its_weight():
    """Traced (dynamo, no C++ needed), a pass of a few rows multiplies by `rows`; eagerly, and for a
    pass longer than MAX_STREAMED_ROWS, by the weight through the BLAS. Rows made twice the weight
    show which one was read."""
    torch.manual_seed(1)
    parent = nn.Sequential(nn.Linear(64, 96, bias=True))
    layer = parent[0]
    layer.weight.data = layer.weight.data.bfloat16().float()
    x, long = torch.randn(1, 3, 64), torch.randn(1, 40, 64)
    with torch.inference_mode():
        want = F.linear(x, layer.weight, layer.bias)
        assert stream_weights([parent]) == {torch.bfloat16}
        streamed = parent[0]
        assert isinstance(streamed, StreamedLinear) and streamed.weight is layer.weight and streamed.bias is layer.bias
        assert torch.equal(streamed(x), want)                               # eager: the BLAS
        streamed.rows.mul_(2)
        traced = torch.compile(streamed, fullgraph=True, backend="eager")
        doubled = F.linear(x, 2 * layer.weight, layer.bias)
        assert torch.allclose(traced(x), doubled, atol=1e-4)               # the graph read the rows
        assert torch.allclose(traced(long), F.linear(long, layer.weight, layer.bias), atol=1e-4)   # prefill: the weight
        assert stream_weights([parent]) == {torch.bfloat16} and parent[0] is streamed                # idempotent


def test_the_embedded_model_streams_every_weight_in_bfloat16_with_the_same_values_and_outputs():
    path = find_model()
    model = Model.from_pretrained(path)
    head = MTP.from_pretrained(model.cfg, path, lm_head=model.lm_head)
    ids = torch.tensor([[5, 9, 2, 7, 1, 3]])
    keys = set(model.state_dict()) | {"mtp." + k for k in head.state_dict()}
    with torch.inference_mode():
        want = model(ids, State(model))
    assert stream_weights([model, head]) == {torch.bfloat16}
    linears = [m for mod in (model, head) for m in mod.modules() if isinstance(m, nn.Linear)]
    assert len(linears) > 60 and all(isinstance(m, StreamedLinear) for m in linears)
    assert all(torch.equal(m.rows.float(), m.weight) for m in linears)
    assert torch.equal(head.draft_proj.rows.float(), model.lm_head.weight[head.draft_vocab])   # the draft's rows
    assert model.lm_head.weight is model.embed_tokens.weight                                   # still tied
    assert set(model.state_dict()) | {"mtp." + k for k in head.state_dict()} == keys           # nothing new saved
    assert not any(p is head.draft_proj.weight for p in head.parameters())                    # nor trained
    with torch.inference_mode():
        assert torch.equal(model(ids, State(model)), want)                                     # eager: unchanged


def test_small_models_and_bfloat16_exact_wide_ones_stream_and_frozen_graphs_keep_plain_linears():
    model, head = random_pair("small", seed=3)
    assert host.choose_strategy([model])[0] is Strategy.STREAMED
    model = steps.compile_model(model, ks=(2,))                 # lazy: prepares, compiles nothing
    head = steps.compile_head(head, ks=(2,), freeze=True)      # frozen graphs hold their own weights
    assert model.steps.strategy is Strategy.STREAMED and head.steps.strategy is Strategy.FROZEN
    assert all(isinstance(m, StreamedLinear) for m in model.modules() if isinstance(m, nn.Linear))
    assert not any(isinstance(m, StreamedLinear) for m in head.modules())
    assert all(m.weight is not None for m in model.modules() if isinstance(m, nn.Linear))     # a small model keeps its own
    wide, _ = random_pair(WIDE, seed=19)
    as_checkpoint(wide)                                  # float32 values bfloat16 holds: a bf16 checkpoint
    assert host.choose_strategy([wide])[0] is Strategy.STREAMED
    assert host.choose_strategy([wide], freeze=True) == (Strategy.FROZEN, "as asked")
    from demo.models import compiled_ks
    assert compiled_ks(wide) == (2, 1, 3)                # one copy of the weights: k = 1 and 3 (auto) compile too


def test_a_wide_model_run_in_bfloat16_freezes_where_a_copy_per_graph_fits(monkeypatch):
    """Where bfloat16 is native the model runs in it; at the 0.8B width frozen graphs decoded
    speculatively faster there, so it freezes, unless the copies do not fit (then it streams)."""
    model, _ = random_pair("small", seed=16)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    fits, why = host.copies_fit(host.weight_bytes([model]), 2, available=4 * weights)
    assert fits and "2 weight copies" in why
    fits, why = host.copies_fit(host.weight_bytes([model]), 3, available=4 * weights)      # 3 copies > half of memory
    assert not fits and "available" in why
    wide, _ = random_pair(WIDE, seed=16)
    wide = wide.to(torch.bfloat16)
    need = sum(p.numel() * p.element_size() for p in wide.parameters())
    monkeypatch.setattr(host, "memory_available", lambda: 10 * need)
    assert host.choose_strategy([wide], graphs=3)[0] is Strategy.FROZEN
    monkeypatch.setattr(host, "memory_available", lambda: 4 * need)
    strategy, why = host.choose_strategy([wide], graphs=3)
    assert strategy is Strategy.STREAMED and "no memory" in why
    assert host.choose_strategy([wide], freeze=False) == (Strategy.STREAMED, "as asked")


def test_a_frozen_head_scores_its_draft_in_its_graphs_where_the_copies_fit(monkeypatch):
    """A frozen head given the model packs the output layer into its graphs (the eager bfloat16 output layer is the
    dearer half of a head pass at the 0.8B shape) only where a copy per graph of head and output layer fits."""
    wide, head = random_pair(WIDE, seed=18)
    wide, head = wide.to(torch.bfloat16), head.to(torch.bfloat16)
    asked = []
    monkeypatch.setattr(steps, "head_graph", lambda h, m=None, scored=False: (asked.append(scored), ([h], head_run))[1])
    both = sum(p.numel() * p.element_size() for p in [*head.parameters(), *wide.lm_head.parameters()])
    alone = sum(p.numel() * p.element_size() for p in head.parameters())
    for memory, scored in ((10 * both, True), (2 * (alone + both), False)):   # 2 graphs (T = 1, 3) in half of it
        monkeypatch.setattr(host, "memory_available", lambda: memory)
        assert 4 * alone <= memory and steps.compile_head(head, ks=(2,), model=wide).steps.strategy is Strategy.FROZEN
        assert asked.pop() is scored
    steps.compile_head(head, ks=(2,), freeze=False, model=wide)              # streamed: scores through StreamedLinear
    assert asked.pop() is False and isinstance(wide.lm_head, StreamedLinear)


def test_the_host_plan_names_what_compile_model_does(monkeypatch):
    """One decision: the plan the app and the command line show is the strategy compile_model takes."""
    model, _ = random_pair("small", seed=4)
    threads = torch.get_num_threads()
    small = host.host_plan(model, "a small model on CPU", ks=(2,))
    assert small.strategy is steps.compile_model(model, ks=(2,)).steps.strategy is Strategy.STREAMED
    assert str(small) == f"cpu · float32 · streamed graphs · {threads} thread{'s' if threads != 1 else ''}"
    assert small.why.startswith("a small model on CPU; ")
    wide, _ = random_pair(WIDE, seed=17)
    wide = wide.to(torch.bfloat16)                       # run in bfloat16, as on a host that multiplies it natively
    need = sum(p.numel() * p.element_size() for p in wide.parameters())
    for memory, want in ((20 * need, Strategy.FROZEN), (3 * need, Strategy.STREAMED)):   # 2 graphs, in half
        monkeypatch.setattr(host, "memory_available", lambda: memory)
        assert host.host_plan(wide, ks=(2,)).strategy is want
        assert steps.compile_model(wide, ks=(2,)).steps.strategy is want
    off = host.host_plan(model, compile=False)
    assert off.strategy is None and "eager" in str(off) and "not asked" in off.why
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(host.shutil, "which", lambda name: None)
    assert host.host_plan(model).strategy is None and "g++" in host.host_plan(model).why


def test_the_first_k_serves_first_and_the_other_lengths_compile_after(tmp_path, monkeypatch):
    """warm_up's phases for ks = (2, 1, 3) (the app's, demo.models.compiled_ks): the decode step and k = 2's
    round graphs first (then the app serves), every other pass after; nothing compiles to say so."""
    from demo.models import compiled_ks
    from qwen.compiled.warmup import warm_up_phases
    monkeypatch.setenv("QWEN_COMPILE_CACHE", str(tmp_path))
    model, head = random_pair("small")
    assert compiled_ks(model) == (2, 1, 3) and compiled_ks(model, ahead=True) == (2,)
    fast = steps.compile_model(model, ks=(2, 1, 3))
    fast_head = steps.compile_head(head, ks=(2, 1, 3), model=fast)
    steps.compile_round(fast, fast_head, ks=(2, 1, 3))
    steps.compile_round(fast, fast_head, ks=(2, 1, 3), sampled=True)
    first, later = warm_up_phases(fast, fast_head, 2)
    rounds = {(part.kind, v) for part, v in first if part.kind.endswith("round")}
    assert rounds == {("round", (3, True)), ("sampled_round", (3, True))} and (fast.steps, (1, False)) in first
    assert {(part.kind, v[0]) for part, v in later if part.kind == "round"} == {("round", 2), ("round", 4)}
    assert len(first) + len(later) == len({(id(p), v) for p, v in first + later})          # each pass once


def test_laying_out_a_model_for_streaming_changes_strides_only():
    """lay_out_transposed: every Linear weight becomes the contiguous transpose and each depthwise conv's taps
    contiguous over the channels (what the graphs read), with the same values, so eager passes (prefill, and the
    conv of more than a few tokens) still compute what the model computed before, up to float32's rounding."""
    model, _ = random_pair("small", seed=5)
    ids = torch.randint(0, model.cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(ids, State(model, 64))
        values = {n: p.detach().clone() for n, p in model.named_parameters()}
        steps.lay_out_transposed([model])
        after = model(ids, State(model, 64))
    assert all(torch.equal(values[n], p) for n, p in model.named_parameters())
    conv = next(m for m in model.modules() if isinstance(m, nn.Conv1d))
    assert all(conv.weight[:, 0, j].is_contiguous() for j in range(conv.weight.shape[2]))
    linear = next(m for m in model.modules() if isinstance(m, nn.Linear) and m.weight is not model.embed_tokens.weight)
    assert linear.weight.t().is_contiguous()
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)      # the BLAS sums in another order


def test_a_wide_model_keeps_one_copy_of_each_weight_and_its_eager_passes_their_values():
    """Prepared for streamed graphs, a wide bfloat16 checkpoint loaded in float32 keeps each weight once, as the
    bfloat16 rows the graphs read: every float32 weight but the output layer's (the embedding's, tied) is released,
    and eager passes (a prefill longer than MAX_STREAMED_ROWS, a step) multiply by the rows converted back, the
    same values, so they compute what the model computed before. The head's weights go the same way."""
    wide, head = random_pair(WIDE, seed=21)
    as_checkpoint(wide), as_checkpoint(head)
    ids = torch.randint(0, wide.cfg.vocab_size, (1, 24), generator=torch.Generator().manual_seed(2))
    linears = lambda module: {n: m for n, m in module.named_modules() if isinstance(m, nn.Linear)}
    values = {n: m.weight.detach().clone() for n, m in linears(wide).items()}
    loaded = host.weight_bytes([wide])
    with torch.no_grad():
        before = [wide(ids, state := State(wide, 32)), wide(ids[:, :1], state)]     # prefill, then a step
    steps.compile_model(wide, ks=(2,))                    # prepares the graphs (compiles nothing yet)
    steps.compile_head(head, ks=(2,), model=wide)
    kept = {n for n, m in linears(wide).items() if m.weight is not None}
    assert kept == {"lm_head"} and wide.lm_head.weight is wide.embed_tokens.weight
    assert all(m.weight is None and m.rows.dtype == torch.bfloat16 for m in linears(head).values())
    assert all(torch.equal(eager_weight(m), values[n]) for n, m in linears(wide).items())
    released = sum(v.numel() * 4 for n, v in values.items() if n != "lm_head")
    assert host.weight_bytes([wide]) == loaded - released
    with torch.no_grad():
        after = [wide(ids, state := State(wide, 32)), wide(ids[:, :1], state)]
    for a, b in zip(after, before):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)          # the BLAS may sum row-major rows in another order


def test_a_wide_models_released_weights_come_back_when_its_compiled_passes_go_off():
    """Eager from now on (compiling failed, or no compiler), a pass through released weights would convert every
    one of them on every call: the float32 weights come back, with the same values. Without a C++ compiler nothing
    is released at all."""
    wide, _ = random_pair(WIDE, seed=22)
    as_checkpoint(wide)
    values = {n: m.weight.detach().clone() for n, m in wide.named_modules() if isinstance(m, nn.Linear)}
    compiled = steps.compile_model(wide, ks=(2,))
    assert wide.layers[0].mlp.down_proj.weight is None
    compiled.steps.disable(steps.Why.FAILED, "a test")
    restored = {n: m.weight for n, m in wide.named_modules() if isinstance(m, nn.Linear)}
    assert all(w is not None and torch.equal(w, values[n]) for n, w in restored.items())
    assert wide.layers[0].mlp.down_proj.weight.t().is_contiguous()            # laid out as eager GEMMs read it


def test_without_a_compiler_a_wide_model_keeps_its_float32_weights(monkeypatch):
    monkeypatch.setattr(steps, "compiler_missing", lambda device: "no C++ compiler (a test)")
    wide, _ = random_pair(WIDE, seed=23)
    as_checkpoint(wide)
    compiled = steps.compile_model(wide, ks=(2,))
    assert compiled.steps.status.why is steps.Why.NO_COMPILER
    assert all(m.weight is not None for m in wide.modules() if isinstance(m, nn.Linear))
