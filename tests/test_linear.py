"""qwen.linear: the weight copy compiled CPU graphs multiply by, checked against nn.functional.linear."""
import pytest
import torch
import torch.nn.functional as F

from qwen import compile as qc
from qwen import linear
from qwen.linear import Linear, rows_matmul, stream_dtype, streamed_copy
from qwen.model import Model
from qwen.mtp import MTP
from qwen.weights import find_model

needs_compiler = pytest.mark.skipif(qc.compiler_missing() is not None, reason="no C++ compiler")


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
def test_compiled_linear_multiplies_by_the_streamed_copy(monkeypatch):
    torch.manual_seed(1)
    layer = Linear(64, 96)
    layer.weight.data = layer.weight.data.bfloat16().float()
    x = torch.randn(1, 3, 64)
    with torch.inference_mode():
        want = F.linear(x, layer.weight)
        assert torch.equal(layer(x), want)                  # eager, without a copy: nn.Linear
        qc.stream_weights([layer])
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
    assert qc.stream_weights([model, head]) == {torch.bfloat16}
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
    qc.compile_model(model, ks=(2,))                 # lazy: prepares, compiles nothing
    qc.compile_head(head, ks=(2,), freeze=True)      # frozen graphs hold their own (packed) weights
    assert all((m.streamed is not None) == streamed for m in model.modules() if isinstance(m, Linear))
    assert all(m.streamed is None for m in head.modules() if isinstance(m, Linear))
