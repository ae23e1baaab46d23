"""The Linear a compiled CPU graph multiplies by: each weight row streamed once, in bfloat16 where exact.

Eagerly a Linear computes x @ W.T through the BLAS. Inside a compiled CPU graph, a StreamedLinear
(swapped in for every Linear by stream_weights) computes instead

    y[m, n] = sum_k x[m, k] * float(rows[n, k])       one dot product per output, summed in float32

which inductor turns into one fused C++ loop reading each weight row once for all rows m of the pass
(T = 1 decode, 1+k verify), converted to float32 in registers. `rows` holds the weight row-major, in
bfloat16 wherever that keeps every value exactly (a bfloat16 checkpoint loaded as float32): the same
products from half the bytes (docs/design.md, why compiled CPU graphs stream bfloat16 weights). Outside a
graph, and for passes of more than MAX_STREAMED_ROWS rows (prefill), it is the Linear it replaced.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_STREAMED_ROWS = 16       # a pass of more rows (prefill) multiplies through the BLAS


class StreamedLinear(nn.Linear):
    """A Linear sharing `linear`'s weight and bias, plus `rows`: the copy compiled graphs stream."""

    def __init__(self, linear):
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        if isinstance(linear.weight, nn.Parameter):
            self.weight = linear.weight                               # the same Parameter (ties stay tied)
        else:                                                         # a weight held as a buffer (mtp.fixed_linear)
            self.register_buffer("weight", linear.weight, persistent=False)
        self.register_parameter("bias", linear.bias)
        self.register_buffer("rows", streamed_copy(linear.weight), persistent=False)   # (out, in)

    def forward(self, x):
        if torch.compiler.is_compiling() and x.numel() // x.shape[-1] <= MAX_STREAMED_ROWS:
            y = rows_matmul(x, self.rows)
            return y if self.bias is None else y + self.bias
        return F.linear(x, self.weight, self.bias)


def rows_matmul(x, w):
    """x (..., K), w (N, K) -> x @ w.T (..., N) in x's dtype, summed in float32: one reduction per row
    of x over the same w, which inductor fuses into a single loop reading w once. (Eagerly this is
    slow: it is written for the compiler.)"""
    lead, rows, wf = x.shape[:-1], x.reshape(-1, x.shape[-1]), w.float()
    y = torch.stack([(rows[m][None, :].float() * wf).sum(-1) for m in range(rows.shape[0])])    # (M, N)
    return y.reshape(*lead, w.shape[0]).to(x.dtype)


def stream_dtype(w):
    """bfloat16 when it holds every value of w exactly (a bf16 checkpoint loaded as float32), else w's dtype."""
    return torch.bfloat16 if w.dtype == torch.float32 and torch.equal(w.to(torch.bfloat16).float(), w) else w.dtype


def streamed_copy(w):
    """The rows compiled graphs read, w (out, in) row-major in stream_dtype(w): w itself where it already
    is both (a bfloat16 model's own weight), else a copy."""
    return w.detach().to(stream_dtype(w)).contiguous()


def stream_weights(modules):
    """Swap every Linear inside these modules for a StreamedLinear over the same weight. Eager passes
    are unchanged. Idempotent. -> the dtypes the graphs stream, e.g. {torch.bfloat16}"""
    dtypes = set()
    for module in modules:
        for parent in list(module.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear) and not isinstance(child, StreamedLinear):
                    setattr(parent, name, StreamedLinear(child))
        dtypes |= {m.rows.dtype for m in module.modules() if isinstance(m, StreamedLinear)}
    return dtypes
