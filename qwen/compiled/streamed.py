"""The Linear a compiled CPU graph multiplies by: each weight row streamed once, in bfloat16 where exact.

Eagerly a Linear computes x @ W.T through the BLAS. Inside a compiled CPU graph, a StreamedLinear
(swapped in for every Linear by stream_weights) computes instead

    y[m, n] = sum_k x[m, k] * float(rows[n, k])       one dot product per output, summed in float32

which inductor turns into one fused C++ loop reading each weight row once for all rows m of the pass
(T = 1 decode, 1+k verify), converted to float32 in registers. `rows` holds the weight row-major, in
bfloat16 wherever that keeps every value exactly (a bfloat16 checkpoint loaded as float32): the same
products from half the bytes (docs/design.md, why compiled CPU graphs stream bfloat16 weights). Outside a
graph, and for passes of more than MAX_STREAMED_ROWS rows (prefill), it is the Linear it replaced.

The same loops make the passes batch invariant: a verify pass's row i is, bit for bit, what a one-row step
computes at that position (docs/design.md, the same text in every dtype). Each output of a StreamedLinear is one
row's own dot product; attention, which scaled_dot_product_attention computes in blocks of rows, is swapped for
RowwiseAttention, whose every row is its own loops too (the graphs' remaining pieces are written for it in the
model: fixed additions in the conv, channels innermost; and steps.ROW_CHUNK keeps a row's reductions on one thread).
RowwiseAttention and ROW_CHUNK apply to wide models (host.is_wide) only: steps._prepare decides.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.attention import Attention

MAX_STREAMED_ROWS = 16       # a pass of more rows (prefill) multiplies through the BLAS


class StreamedLinear(nn.Linear):
    """A Linear sharing `linear`'s weight and bias, plus `rows`: the copy compiled graphs stream. Once
    release_weight() has dropped the weight (None), eager passes multiply by the rows converted back to
    float32: the same values, so the same outputs, at the cost of a conversion per eager call."""

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
        return F.linear(x, eager_weight(self), self.bias)

    def release_weight(self):
        """Drop the float32 weight where `rows` is a bfloat16 copy holding it exactly (else keep it); eager
        passes then convert the rows."""
        w = self.weight
        if w is None or self.rows.dtype != torch.bfloat16 or w.dtype != torch.float32:
            return
        if isinstance(w, nn.Parameter):
            self.register_parameter("weight", None)
        else:
            self.register_buffer("weight", None, persistent=False)

    def restore_weight(self):
        """Undo release_weight, for passes that run eagerly from now on: the float32 weight again, laid out as
        the contiguous transpose an eager GEMM reads best (steps.lay_out_transposed)."""
        if self.weight is None:
            w = self.rows.to(torch.float32).t().contiguous().t()                          # (out, in), strides (1, out)
            if "weight" in self._buffers:                                                 # mtp.fixed_linear's
                self.register_buffer("weight", w, persistent=False)
            else:
                self.weight = nn.Parameter(w, requires_grad=False)


def eager_weight(linear):
    """The weight an eager pass multiplies by, (out, in): the Linear's own, or where a StreamedLinear released
    it, its rows converted back to float32 (the same values)."""
    return linear.weight if linear.weight is not None else linear.rows.to(torch.float32)


def rows_matmul(x, w):
    """x (..., K), w (N, K) -> x @ w.T (..., N) in x's dtype, summed in float32: one reduction per row
    of x over the same w, which inductor fuses into a single loop reading w once. (Eagerly this is
    slow: it is written for the compiler.)"""
    lead, rows, wf = x.shape[:-1], x.reshape(-1, x.shape[-1]), w.float()
    y = torch.stack([(rows[m][None, :].float() * wf).sum(-1) for m in range(rows.shape[0])])    # (M, N)
    return y.reshape(*lead, w.shape[0]).to(x.dtype)


def stream_dtype(w, chunk=1 << 22):
    """bfloat16 when it holds every value of w exactly (a bf16 checkpoint loaded as float32), else w's dtype.
    Checked a block of rows (about `chunk` values) at a time: the output layer's full-size round trip would
    cost more memory than its bfloat16 copy."""
    if w.dtype != torch.float32:
        return w.dtype
    rows = w.detach().reshape(1, -1) if w.dim() < 2 else w.detach()
    step = max(1, chunk // max(1, rows[0].numel()))
    exact = all(torch.equal(rows[i:i + step].to(torch.bfloat16).float(), rows[i:i + step])
                for i in range(0, rows.shape[0], step))
    return torch.bfloat16 if exact else w.dtype


def streamed_copy(w):
    """The rows compiled graphs read, w (out, in) row-major in stream_dtype(w): w itself where it already
    is both (a bfloat16 model's own weight), else a copy."""
    return w.detach().to(stream_dtype(w)).contiguous()


def rowwise_attention(q, k, v, bias):
    """Attention written as each query row's own reductions: q (B, nh, T, D), k and v (B, nkv, S, D), bias
    (B or 1, 1, T, S) additive -> (B, nh, T, D). Compiled, every row's scores, softmax and weighted sum are loops
    over that row alone, so a pass of T rows gives each row what a one-row pass gives it."""
    B, nh, T, D = q.shape
    nkv = k.shape[1]
    q = q.reshape(B, nkv, nh // nkv, T, 1, D) * D ** -0.5                        # query groups share a KV head
    scores = (q * k[:, :, None, None]).sum(-1) + bias[:, :, None]                 # (B, nkv, g, T, S)
    weights = torch.softmax(scores, dim=-1)
    out = (weights[..., None] * v[:, :, None, None]).sum(-2)                      # (B, nkv, g, T, D)
    return out.reshape(B, nh, T, D)


class RowwiseAttention(Attention):
    """An Attention whose compiled passes of up to MAX_STREAMED_ROWS rows weigh the values row by row
    (rowwise_attention); eagerly, and for longer passes (prefill), it is the Attention it was."""

    def weigh(self, q, k, v, bias):
        if torch.compiler.is_compiling() and q.shape[2] <= MAX_STREAMED_ROWS:
            return rowwise_attention(q, k, v, bias)
        return super().weigh(q, k, v, bias)


def stream_weights(modules, rowwise=True, release=False):
    """Swap every Linear inside these modules for a StreamedLinear over the same weight, and (rowwise) every
    Attention for a RowwiseAttention (its class: the same parameters). Eager passes are unchanged. Idempotent.
    release: drop each float32 weight its bfloat16 rows hold exactly (StreamedLinear.release_weight), except the
    output layer's, which an Embedding shares or a draft vocabulary is cut from: a wide model's compiled passes read
    only the rows, and its float32 weights would be the largest block of its memory (docs/design.md).
    -> the dtypes the graphs stream, e.g. {torch.bfloat16}"""
    dtypes = set()
    for module in modules:
        for child in module.modules():
            if rowwise and type(child) is Attention:
                child.__class__ = RowwiseAttention
        shared = {id(m.weight) for m in module.modules() if isinstance(m, nn.Embedding)}
        # subtle: not list(module.modules()), which would hold every replaced Linear, and so its weight, to the end
        for parent in [m for m in module.modules() if not isinstance(m, nn.Linear)]:
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear) and not isinstance(child, StreamedLinear):
                    child = StreamedLinear(child)
                    setattr(parent, name, child)
                if release and isinstance(child, StreamedLinear) and name != "lm_head" \
                        and id(child.weight) not in shared:
                    child.release_weight()
        dtypes |= {m.rows.dtype for m in module.modules() if isinstance(m, StreamedLinear)}
    return dtypes


def restore_weights(modules):
    """StreamedLinear.restore_weight for every Linear of these modules: their compiled passes are off, and an eager
    pass through released weights would convert each of them on every call."""
    for module in modules:
        for child in module.modules():
            if isinstance(child, StreamedLinear):
                child.restore_weight()
