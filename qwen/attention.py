"""Gated full attention, the 1-in-4 layer of the hybrid stack.

Compared with plain multi-head attention it has three extras:
- the query projection is twice as wide: per head, the first half is the query, the second half a
  gate; the attention output is multiplied by sigmoid(gate) before o_proj;
- q and k are RMS-normalised per head (q_norm, k_norm) before rotary embedding;
- keys and values have fewer heads than queries (grouped-query attention).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.norm import RMSNorm
from qwen.rope import apply_rope
from qwen.tree import tree_tensor


def attention_mask(positions, capacity, pad=None, tree=None):
    """Which of the `capacity` key slots each new query may see.

    Query t (at position positions[t]) sees keys 0..positions[t]: the causal rule, which also hides
    every slot not yet written (or written by a draft that was rolled back). A left-padded row also
    hides its padding. With a draft tree (qwen.tree.Tree, batch 1), query t sees the keys before the pass
    and, of the pass's slots, its ancestors' (Tree.seen; a chain's is the causal rule).
    positions: (T,); pad: (B,) or None -> (B or 1, 1, T, capacity) bool"""
    keys = torch.arange(capacity, device=positions.device)
    if tree is not None:
        mask = (keys[None, :] < positions[:1, None]).repeat(len(positions), 1)             # (T, S): the past
        mask[:, positions] = tree_tensor(tree.seen, positions.device)                       # and its ancestors
        return mask[None, None]
    mask = keys[None, :] <= positions[:, None]                        # (T, S)
    if pad is None:
        return mask[None, None]
    real = keys[None, :] >= pad[:, None]                              # (B, S)
    mask = mask[None] & real[:, None]                                 # (B, T, S)
    # subtle: a padding query sees no real key; let it see itself so softmax stays finite (its output is unused)
    mask = mask | (keys[None, :] == positions[:, None])[None]
    return mask[:, None]


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, D = cfg.hidden_size, cfg.head_dim
        self.n_heads, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, D
        self.q_proj = nn.Linear(H, self.n_heads * D * 2, bias=False)    # query and gate, interleaved per head
        self.k_proj = nn.Linear(H, self.n_kv * D, bias=False)
        self.v_proj = nn.Linear(H, self.n_kv * D, bias=False)
        self.o_proj = nn.Linear(self.n_heads * D, H, bias=False)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, cache, positions, pad=None, tree=None):
        """x: (B, T, H) at `positions` (T,); cache: AttentionState, written at those positions -> (B, T, H).
        tree: the rows' qwen.tree.Tree (each sees its ancestors), or None for a sequence."""
        q, k, v, gate = self.project(x, cos, sin)
        k, v = cache.write(positions, k, v)                                           # (B, nkv, capacity, D)
        return self.attend(q, k, v, gate, attention_mask(positions, k.shape[2], pad, tree))

    def project(self, x, cos, sin):
        """x: (B, T, H) -> queries (B, nh, T, D), keys and values (B, nkv, T, D), rotated; gate (B, T, nh, D)"""
        B, T, _ = x.shape
        D = self.head_dim
        q, gate = self.q_proj(x).view(B, T, self.n_heads, 2 * D).chunk(2, dim=-1)   # each (B, T, nh, D)
        q = self.q_norm(q).transpose(1, 2)                                            # (B, nh, T, D)
        k = self.k_norm(self.k_proj(x).view(B, T, self.n_kv, D)).transpose(1, 2)     # (B, nkv, T, D)
        v = self.v_proj(x).view(B, T, self.n_kv, D).transpose(1, 2)                  # (B, nkv, T, D)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, gate

    def attend(self, q, k, v, gate, mask):
        """Queries over the key slots `mask` (bool, (B or 1, 1, T, S)) lets each see, gated -> (B, T, H)"""
        B, _, T, _ = q.shape
        # subtle: passed as an additive float mask (0 or -inf). With the boolean mask, torch 2.13's
        # compiled flash-attention path for grouped queries corrupted memory (head_dim 64, CPU).
        bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
        y = self.weigh(q, k, v, bias)                                                 # (B, nh, T, D)
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        return self.o_proj(y * torch.sigmoid(gate.reshape(B, T, -1)))

    def weigh(self, q, k, v, bias):
        """Each query's softmax-weighted sum of the values: q (B, nh, T, D), k and v (B, nkv, S, D), bias (B or 1,
        1, T, S) additive -> (B, nh, T, D). The method compiled CPU graphs override (qwen.compiled.streamed
        .RowwiseAttention), to compute every row as a one-row pass computes it."""
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=self.n_heads != self.n_kv)
