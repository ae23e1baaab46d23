"""The engine's Linear layer: nn.Linear, plus the way compiled CPU graphs multiply by its weight.

Eagerly, `Linear` is exactly nn.Linear (the BLAS computes x @ W.T). Where qwen.compiled prepares
compiled passes of a small model on CPU, it gives each Linear a second copy of its weight,
`streamed` (out, in), row-major, and inside those graphs the layer computes

    y[m, n] = sum_k x[m, k] * float(streamed[n, k])       one dot product per output, in float32

which inductor turns into one fused C++ loop: each weight row is read once for all rows m of the
pass (T = 1 decode, 1+k verify), converted to float32 in registers, and never goes through the BLAS.
The checkpoint is bfloat16, so `streamed` holds it in bfloat16 whenever that keeps every value
exactly (stream_dtype): the same products as float32, from half the bytes.

Why not the BLAS? A decoding step reads every weight once, and that is most of its time: streaming
each weight once per pass, from half the bytes, is faster than the BLAS for a few rows on CPU
(docs/design.md, why compiled CPU graphs stream bfloat16 weights; docs/benchmarks.md, 2026-11-30,
the graphs' own loops).
- subtle: MKL runs its generic code on AMD CPUs (`mkl_blas_def_*`, not its AVX2 kernels): there its
  GEMVs take much of compiled decoding, and a few rows of the output layer cost several times one row.
- subtle: a small model's float32 weights may not fit the part of the cache a core reads fast, where
  the bfloat16 copy does.

Large models (hidden >= 1024) stream too where bfloat16 holds their weights exactly (a bf16
checkpoint loaded as float32; qwen.compiled.steps.streams_wide_weights): their steps read the weights
from memory, so half the bytes is most of the gain. Otherwise they compile differently (frozen, packed
weights; qwen.compiled.steps) and never set `streamed`. Their eager passes (the one-token decode step,
prefill, every pass not compiled) may multiply by `packed` instead: the weight reordered once by oneDNN
(mkldnn) into the blocked layout its kernels read, one copy serving every number of rows (pack_weights).
- subtle: where MKL runs its generic code (AMD CPUs), oneDNN's packed weights made a wide model's eager
  decode step much faster, with the same tokens (docs/benchmarks.md, 2026-12-01, packed weights).
  qwen.compiled.warm_up keeps the packed copies only where the step measures faster with them:
  elsewhere (MKL on Intel) the BLAS may be as fast.
Eager code that never calls pack_weights (the reference, the tests' default) stays nn.Linear.
"""
import contextlib
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_STREAMED_ROWS = 16       # a pass of more rows (prefill) multiplies through the BLAS
_plain = threading.local()   # .on: this thread ignores packed copies (plain_weights)


class Linear(nn.Linear):
    """nn.Linear; inside a compiled graph, with `streamed` set (qwen.compiled.steps.stream_weights), rows_matmul;
    eagerly, with `packed` set (pack_weights), oneDNN's linear on the packed copy."""

    def __init__(self, in_features, out_features, bias=False, **kw):
        super().__init__(in_features, out_features, bias=bias, **kw)
        self.register_buffer("streamed", None, persistent=False)     # (out, in), set by qwen.compiled
        self.packed = None       # oneDNN's layout of weight (an opaque mkldnn tensor), set by pack_weights

    def __getstate__(self):
        # an mkldnn tensor does not pickle (compile helpers, copies): a copy multiplies by the BLAS
        return {**self.__dict__, "packed": None}

    def forward(self, x):
        if self.streamed is not None and torch.compiler.is_compiling() \
                and x.numel() // x.shape[-1] <= MAX_STREAMED_ROWS:
            y = rows_matmul(x, self.streamed)
            return y if self.bias is None else y + self.bias
        # subtle: is_compiling() first, so that a graph never reads `packed`: dynamo would guard on that
        # object, and freeing the copies (qwen.compiled.warmup._drop_packing_if_compiled) would recompile every graph
        if not torch.compiler.is_compiling() and self.packed is not None and x.dtype == torch.float32 \
                and not torch.is_grad_enabled() and not getattr(_plain, "on", False):
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def rows_matmul(x, w):
    """x (..., K), w (N, K) -> x @ w.T (..., N) in x's dtype, summed in float32: one reduction per row
    of x over the same w, which inductor fuses into a single loop reading w once. (Eagerly this is
    slow: it is written for the compiler.)"""
    lead, rows, wf = x.shape[:-1], x.reshape(-1, x.shape[-1]), w.float()
    y = torch.stack([(rows[m][None, :].float() * wf).sum(-1) for m in range(rows.shape[0])])    # (M, N)
    return y.reshape(*lead, w.shape[0]).to(x.dtype)


def packing_missing():
    """Why oneDNN's packed linear is unavailable in this torch build, or None."""
    if not torch.backends.mkldnn.is_available():
        return "torch was built without oneDNN (mkldnn)"
    if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return "this torch has no mkldnn._reorder_linear_weight"
    return None


def pack_weights(modules):
    """Give every float32 CPU Linear of these modules `packed`: its weight reordered once by oneDNN
    (for one row; the same copy serves any number), which eager passes then multiply by. Idempotent;
    a tied weight (lm_head = embed_tokens) gets its own packed copy. -> bytes the copies hold"""
    total = 0
    for module in modules:
        for linear in module.modules():
            w = linear.weight if isinstance(linear, Linear) else None
            if w is None or w.dtype != torch.float32 or w.device.type != "cpu":
                continue
            if linear.packed is None:
                linear.packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), 1)
            total += w.numel() * w.element_size()
    return total


def unpack_weights(modules):
    """Drop the packed copies (their memory is freed): eager passes use the BLAS again."""
    for module in modules:
        for linear in module.modules():
            if isinstance(linear, Linear):
                linear.packed = None


@contextlib.contextmanager
def plain_weights():
    """Within this block, this thread's eager passes ignore packed copies (to time one against the
    other while other threads go on using them)."""
    before = getattr(_plain, "on", False)
    _plain.on = True
    try:
        yield
    finally:
        _plain.on = before


def stream_dtype(w):
    """bfloat16 when it holds every value of w exactly (a bf16 checkpoint loaded as float32), else w's dtype."""
    return torch.bfloat16 if w.dtype == torch.float32 and torch.equal(w.to(torch.bfloat16).float(), w) else w.dtype


def streamed_copy(w):
    """The copy of w (out, in) that compiled graphs read: row-major, in stream_dtype(w)."""
    return w.detach().to(stream_dtype(w)).contiguous()
