"""Gated DeltaNet, the 3-in-4 layer of the hybrid stack: linear attention with a recurrent memory.

Per token t and value head h the layer keeps a memory matrix S (key_dim x value_dim) and updates it
with the gated delta rule:

    S = S * exp(g_t)                       forget a little (g_t <= 0, from A_log and dt_bias)
    S = S + k_t (beta_t (v_t - k_t^T S))   write the part of v_t the memory does not yet predict
    o_t = q_t^T S                          read

Before that, q/k/v come from one projection (in_proj_qkv) passed through a depthwise causal conv1d
(kernel K, so the layer also remembers its last K-1 inputs: the conv window) and SiLU; q and k are
l2-normalised. The output is RMS-normalised per head, gated by silu(in_proj_z(x)) and projected back.
Value heads may outnumber key heads: each q/k head then serves several consecutive value heads.

`delta_rule_recurrent` below is the rule one token at a time (decode, verification, and the obvious
reference); chunk.py holds the parallel form used for prefill. A verify pass that keeps step states
(qwen.cache.keep_step_states) writes no memory: it keeps each row's write (decay, k, delta: a few
vectors), and the round writes the accepted rows' ones after it knows how many (take_step_states).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.cache import write_row
from qwen.chunk import delta_rule_chunked
from qwen.norm import GatedRMSNorm
from qwen.tree import tree_tensor

RECURRENT_MAX_T = 8    # passes up to this many tokens (decode, verification) run token by token


def l2_normalize(x, eps=1e-6):
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def taps_sum(inputs, weight):
    """A depthwise conv's output from its K shifted inputs, each (B, T, C), and weight (C, 1, K) -> (B, T, C):
    w_0 x_0 + w_1 x_1 + ... added left to right, the same additions for every row (a sum over a K axis may be
    vectorised, and so ordered, one way for one row and another for several)."""
    out = inputs[0] * weight[:, 0, 0]                                       # (C,): one tap per channel
    for j in range(1, len(inputs)):
        out = out + inputs[j] * weight[:, 0, j]
    return out


def delta_rule_step(S, decay, k_t, q_t, v_t, beta_t):
    """The gated delta rule for one token of each memory in S (N, H, Dk, Dv): decay (N, H, 1, 1); k_t, q_t
    (N, H, 1, Dk); v_t (N, H, 1, Dv); beta_t (N, H, 1, 1). -> (the memory after it, the output (N, H, Dv),
    the token's write: delta (N, H, 1, Dv))"""
    # one pass over the old memory reads both k^T S and q^T S: (N, H, 2, Dv)
    read = torch.cat([k_t, q_t], dim=2) @ S
    predicted = decay * read[:, :, :1]                                      # k^T (decayed S): (N, H, 1, Dv)
    delta = (v_t - predicted) * beta_t
    S = write_row(S, decay, k_t, delta)                                     # decayed S + k delta^T
    # q^T (new S) = q^T (decayed S) + (q . k) delta, without another pass over S
    return S, (decay * read[:, :, 1:] + (q_t * k_t).sum(-1, keepdim=True) * delta)[:, :, 0], delta


def delta_rule_recurrent(q, k, v, g, beta, S=None, parents=None):
    """The gated delta rule, one token at a time (delta_rule_step).

    q, k: (B, H, T, Dk) l2-normalised; v: (B, H, T, Dv); g, beta: (B, H, T); S: (B, H, Dk, Dv) or None.
    parents: for a draft tree's rows (qwen.tree.Tree.parents; B = 1), each row's memory starts from its
    parent's (-1: S) instead of the previous token's, and the rows of one depth step together, as a batch.
    None: a sequence (a chain's parents would be -1, 0, 1, ...).
    -> out (B, H, T, Dv), the memory after the last row, and each row's write [(decay, k_t, delta)]: what
    write_row needs to redo it (qwen.cache keeps them for a round's commit). S itself is left as it was."""
    B, H, T, Dk = k.shape
    q = q * Dk ** -0.5
    if S is None:
        S = q.new_zeros(B, H, Dk, v.shape[-1])
    if parents is None:                          # a sequence: token by token, each from the one before it
        outs, writes = [], []
        for t in range(T):
            decay, k_t = g[:, :, t, None, None].exp(), k[:, :, t, None, :]
            S, out, delta = delta_rule_step(S, decay, k_t, q[:, :, t, None, :], v[:, :, t, None, :],
                                            beta[:, :, t, None, None])
            outs.append(out)
            writes.append((decay, k_t, delta))
        return torch.stack(outs, dim=2), S, writes
    # a tree: depth by depth, the rows of a depth as one batch, each from its parent's memory
    depths = [0] * T
    for r in range(1, T):
        depths[r] = depths[parents[r]] + 1
    outs, steps, writes = [None] * T, [None] * T, [None] * T
    for depth in range(max(depths) + 1):
        rows = [r for r in range(T) if depths[r] == depth]
        pick = tree_tensor(tuple(rows), q.device)
        at = lambda x: x.index_select(2, pick).transpose(0, 2)              # noqa: E731  (1, H, T, ..) -> (rows, H, 1, ..)
        before = torch.cat([S if parents[r] < 0 else steps[parents[r]] for r in rows])   # (rows, H, Dk, Dv)
        decay, k_t = at(g[..., None]).exp(), at(k)
        after, out, delta = delta_rule_step(before, decay, k_t, at(q), at(v), at(beta[..., None]))
        for i, r in enumerate(rows):
            outs[r], steps[r] = out[i:i + 1], after[i:i + 1]
            writes[r] = (decay[i:i + 1], k_t[i:i + 1], delta[i:i + 1])
    return torch.stack(outs, dim=2), steps[-1], writes


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H = cfg.hidden_size
        self.nk, self.nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.dk, self.dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.kernel = cfg.linear_conv_kernel_dim
        self.conv_dim = 2 * self.nk * self.dk + self.nv * self.dv              # q, k, v side by side
        self.in_proj_qkv = nn.Linear(H, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(H, self.nv * self.dv, bias=False)
        self.in_proj_b = nn.Linear(H, self.nv, bias=False)
        self.in_proj_a = nn.Linear(H, self.nv, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel, groups=self.conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.nv))
        self.A_log = nn.Parameter(torch.zeros(self.nv))
        self.norm = GatedRMSNorm(self.dv, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(self.nv * self.dv, H, bias=False)

    def conv(self, x, cache, tree=None):
        """Depthwise causal conv over [window, new inputs]; updates cache.conv (B, C, K-1) in place. x: (B, T, C) ->
        (B, T, C). With a draft tree, each row reads its ancestors' inputs (Tree.conv_reads), not the rows before it.
        subtle: computed with the channels innermost, as every other piece of a pass is, so that compiled, each row is
        the same loop over channels whatever the row count (with the rows innermost, a one-row pass runs scalar code
        and a three-row pass vector code, whose exp in silu rounds differently: docs/design.md, batch invariance)."""
        B, T, C = x.shape
        full = torch.cat([cache.conv.to(x.dtype).transpose(1, 2), x], dim=1)            # (B, K-1+T, C)
        if tree is not None:                     # row r reads full[:, reads[r]]; its window after it: all but the first
            reads = tree_tensor(tree.conv_reads(self.kernel), x.device)                    # (T, K)
            windows = full[:, reads.reshape(-1)].view(B, T, self.kernel, C)               # (B, T, K, C)
            if cache.keep_steps:
                cache.conv_steps[:T].copy_(windows[:, :, 1:].permute(1, 0, 3, 2))
            cache.conv.copy_(windows[:, -1, 1:].transpose(1, 2))
            return F.silu(taps_sum([windows[:, :, j] for j in range(self.kernel)], self.conv1d.weight))
        if cache.keep_steps:                     # the window after token t is full[:, t+1 : t+K]
            windows = full.unfold(1, self.kernel - 1, 1)[:, 1:T + 1]                    # (B, T, C, K-1)
            cache.conv_steps[:T].copy_(windows.transpose(0, 1))
        if T <= RECURRENT_MAX_T:       # a few tokens: K multiply-adds per channel beat a conv kernel launch
            out = taps_sum([full[:, j:j + T] for j in range(self.kernel)], self.conv1d.weight)     # (B, T, C)
        else:
            out = F.conv1d(full.transpose(1, 2), self.conv1d.weight, groups=C).transpose(1, 2)
        cache.conv.copy_(full[:, T:].transpose(1, 2))                          # the last K-1 inputs
        return F.silu(out)

    def forward(self, x, cache, real=None, tree=None):
        """x: (B, T, H); cache: DeltaNetState, advanced by T tokens in place; real: (B, T) bool, False on padding.
        tree: the rows' qwen.tree.Tree (each row's conv window and memory follow its ancestors; the state is
        left holding the last row's), or None for a sequence."""
        B, T, _ = x.shape
        if real is not None:                                  # padding must write nothing into the memory
            x = x * real[..., None].to(x.dtype)
        qkv = self.conv(self.in_proj_qkv(x), cache, tree)                              # (B, T, C)
        q, k, v = qkv.split([self.nk * self.dk, self.nk * self.dk, self.nv * self.dv], dim=-1)
        q = l2_normalize(q.reshape(B, T, self.nk, self.dk))
        k = l2_normalize(k.reshape(B, T, self.nk, self.dk))
        v = v.reshape(B, T, self.nv, self.dv).float()
        if self.nv != self.nk:                                # each q/k head serves nv/nk value heads
            q = q.repeat_interleave(self.nv // self.nk, dim=2)
            k = k.repeat_interleave(self.nv // self.nk, dim=2)
        beta = torch.sigmoid(self.in_proj_b(x).float())                                 # (B, T, nv)
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias.float())
        q, k, v, beta, g = (t.transpose(1, 2) for t in (q, k, v, beta, g))            # heads first
        # subtle: when training, autograd keeps the old memory for the backward pass; never overwrite it under it
        S = cache.S.clone() if torch.is_grad_enabled() else cache.S
        if T <= RECURRENT_MAX_T or cache.keep_steps or tree is not None:
            out, S, writes = delta_rule_recurrent(q, k, v, g, beta, S, tree.parents if tree is not None else None)
        else:
            out, S = delta_rule_chunked(q, k, v, g, beta, S)
        if cache.keep_steps:     # one memory: leave it as it was, keep each row's write for the round's commit
            for name, parts in zip(("row_decay", "row_k", "row_delta"), zip(*writes)):
                getattr(cache, name)[:T].copy_(torch.stack(parts))        # (T, B, nv, 1, 1 | dk | dv)
        else:
            cache.S.copy_(S)                                  # in place: the buffer outlives the pass
        out = out.transpose(1, 2).to(x.dtype)                                           # (B, T, nv, dv)
        z = self.in_proj_z(x).view(B, T, self.nv, self.dv)
        return self.out_proj(self.norm(out, z).reshape(B, T, -1))
