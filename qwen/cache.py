"""The generation state, passed into every forward: what each layer remembers about the tokens so far.

    State.pos          number of positions already processed (the next token's position)
    State.pad          (B,) left-padding per row, or None (see batch.py)
    State.layers[i]    AttentionState  for a full-attention layer: the KV cache
                         k, v: (B, kv_heads, T, head_dim), growing by one column per token
                       DeltaNetState   for a Gated DeltaNet layer: a fixed-size recurrent memory
                         conv: (B, conv_dim, K-1)  the last K-1 inputs of the causal conv
                         S:    (B, value_heads, key_dim, value_dim)  the memory matrix, float32

Rolling back is where the two kinds differ. A KV cache holds one column per position, so going back
to position n is `k[:, :, :n]`. The DeltaNet memory is a running sum that every token rewrote in
place of the old one; there is nothing to cut. It has to be copied before (snapshot / restore), or
kept after each of the positions we may want to return to (keep_step_states / select_step_states).

Every verb here changes `state` in place, and says so in its name.
"""
from dataclasses import dataclass, field

import torch


@dataclass(eq=False)        # identity, not tensor-by-tensor comparison
class AttentionState:
    k: torch.Tensor = None       # (B, kv_heads, T, head_dim)
    v: torch.Tensor = None       # (B, kv_heads, T, head_dim)

    def length(self):
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k, v):
        """Add new columns (B, kv_heads, T_new, head_dim); return the whole cache."""
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def truncate(self, n):
        """Forget every position from n on."""
        if self.k is not None and self.k.shape[2] > n:
            self.k, self.v = self.k[:, :, :n], self.v[:, :, :n]

    def nbytes(self):
        return 0 if self.k is None else self.k.nbytes + self.v.nbytes


@dataclass(eq=False)
class DeltaNetState:
    conv: torch.Tensor = None    # (B, conv_dim, K-1)
    S: torch.Tensor = None       # (B, value_heads, key_dim, value_dim)
    keep_steps: bool = False     # when set, the next forward also records the state after each token
    conv_steps: list = field(default_factory=list)   # [T] of (B, conv_dim, K-1)
    S_steps: list = field(default_factory=list)      # [T] of (B, value_heads, key_dim, value_dim)

    def nbytes(self):
        return sum(t.nbytes for t in (self.conv, self.S) if t is not None)


class State:
    def __init__(self, model, batch=1):
        cfg = getattr(model, "cfg", model)
        self.pos = 0
        self.pad = None
        self.layers = [AttentionState() if t == "full_attention" else DeltaNetState() for t in cfg.layer_types]

    def attention_layers(self):
        return [s for s in self.layers if isinstance(s, AttentionState)]

    def deltanet_layers(self):
        return [s for s in self.layers if isinstance(s, DeltaNetState)]


@dataclass
class Snapshot:
    pos: int
    kv_lengths: list             # per attention layer: the length to truncate back to
    recurrent: list              # per DeltaNet layer: (conv copy, S copy)


def state_bytes(state):
    """Bytes held by the whole state (KV caches + recurrent memories)."""
    return sum(s.nbytes() for s in state.layers)


def snapshot_state(state):
    """Remember where we are. KV caches need only their length; recurrent memories are copied."""
    return Snapshot(pos=state.pos,
                    kv_lengths=[s.length() for s in state.attention_layers()],
                    recurrent=[(s.conv.clone(), s.S.clone()) for s in state.deltanet_layers()])


def snapshot_bytes(snap):
    return sum(c.nbytes + S.nbytes for c, S in snap.recurrent)


def restore_state(state, snap):
    """Go back to the snapshot: truncate KV caches, put the copied memories back (in place)."""
    state.pos = snap.pos
    for s, n in zip(state.attention_layers(), snap.kv_lengths):
        s.truncate(n)
    for s, (conv, S) in zip(state.deltanet_layers(), snap.recurrent):
        s.conv, s.S = conv.clone(), S.clone()


def truncate_kv(cache, n):
    """Truncate KV caches (a State's, or a single AttentionState) to their first n positions, in place."""
    layers = cache.attention_layers() if isinstance(cache, State) else [cache]
    for s in layers:
        s.truncate(n)


def keep_step_states(state, on=True):
    """Ask every DeltaNet layer to record its memory and conv window after each token of the next pass."""
    for s in state.deltanet_layers():
        s.keep_steps, s.conv_steps, s.S_steps = on, [], []


def select_step_states(state, start, n):
    """After a pass that began at position `start` with keep_step_states on, keep only its first n tokens:
    each DeltaNet layer takes the memory recorded after token n, KV caches are cut to start + n. In place.

    subtle: no recomputation — the states after every token were kept during the pass."""
    if n < 1:
        raise ValueError("select_step_states keeps at least the pass's first token (n >= 1)")
    state.pos = start + n
    truncate_kv(state, start + n)
    for s in state.deltanet_layers():
        s.conv, s.S = s.conv_steps[n - 1], s.S_steps[n - 1]
        s.keep_steps, s.conv_steps, s.S_steps = False, [], []
