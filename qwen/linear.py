"""The engine's Linear layer: nn.Linear, plus the way compiled CPU graphs multiply by its weight.

Eagerly, `Linear` is exactly nn.Linear (the BLAS computes x @ W.T). Where compile.py prepares
compiled passes of a small model on CPU, it gives each Linear a second copy of its weight,
`streamed` (out, in), row-major, and inside those graphs the layer computes

    y[m, n] = sum_k x[m, k] * float(streamed[n, k])       one dot product per output, in float32

which inductor turns into one fused C++ loop: each weight row is read once for all rows m of the
pass (T = 1 decode, 1+k verify), converted to float32 in registers, and never goes through the BLAS.

Why not the BLAS? On the embedded model a decoding step reads every weight once, 17 MB in float32,
and that is most of its time.
- subtle: MKL runs its generic code on AMD CPUs (`mkl_blas_def_*`, not its AVX2 kernels): on an AMD
  EPYC host `perf` found its GEMVs taking 53% of compiled plain decoding, and three rows of the
  output layer cost 2.7x one row.
- The checkpoint is bfloat16, so `streamed` holds it in bfloat16 whenever that keeps every value
  exactly (stream_dtype): the same products as float32, from half the bytes. 8.7 MB fits the part of
  the cache a core reads at 40-50 GB/s; 17 MB does not (7-15 GB/s on that host).
Measured there (AVX2, one thread, compiled, k=2): plain decoding 1.74x faster than with the BLAS,
speculative 1.72x (benchmarks in the README).

Large models (hidden >= 1024) compile differently (frozen, packed weights; compile.py) and never set
`streamed`; neither does eager code, so `Linear` stays nn.Linear for them.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_STREAMED_ROWS = 16       # a pass of more rows (prefill) multiplies through the BLAS


class Linear(nn.Linear):
    """nn.Linear; inside a compiled graph, with `streamed` set (compile.stream_weights), rows_matmul."""

    def __init__(self, in_features, out_features, bias=False, **kw):
        super().__init__(in_features, out_features, bias=bias, **kw)
        self.register_buffer("streamed", None, persistent=False)     # (out, in), set by compile.py

    def forward(self, x):
        if self.streamed is not None and torch.compiler.is_compiling() \
                and x.numel() // x.shape[-1] <= MAX_STREAMED_ROWS:
            y = rows_matmul(x, self.streamed)
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
    """The copy of w (out, in) that compiled graphs read: row-major, in stream_dtype(w)."""
    return w.detach().to(stream_dtype(w)).contiguous()
