"""The generation state, passed into every forward: what each layer remembers about the tokens so far.

Every buffer has a fixed shape once allocated and is written in place, so a compiled step sees the
same tensors pass after pass (see qwen.compiled); only `pos` and the KV lengths, plain Python ints,
move.

    State.pos          number of positions already processed (the next token's position)
    State.pad          (B,) left-padding per row, or None (see batch.py)
    State.layers[i]    AttentionState  for a full-attention layer: the KV cache
                         k, v: (B, kv_heads, capacity, head_dim), written by position;
                         positions 0..length-1 are valid, the rest is room to grow (masked out)
                       DeltaNetState   for a Gated DeltaNet layer: a fixed-size recurrent memory
                         conv: (B, conv_dim, K-1)  the last K-1 inputs of the causal conv
                         S:    (B, value_heads, key_dim, value_dim)  the memory matrix, float32
                         conv_steps, S_steps: (slots, ...) the same after each token of a pass,
                           filled only when keep_step_states asked for them

Rolling back is where the two kinds differ. A KV cache holds one column per position, so going back
to position n is setting its length to n (the columns after it are overwritten before anyone reads
them). The DeltaNet memory is a running sum that every token rewrote in place of the old one; there
is nothing to cut. It has to be copied before (snapshot / restore), or kept after each of the
positions we may want to return to (keep_step_states / select_step_states).

Every verb here changes `state` in place, and says so in its name.
"""
import copy
from dataclasses import dataclass

import torch

MIN_CAPACITY = 64            # KV capacity grows in powers of two from here: few distinct shapes
STEP_SLOTS = 9               # per-token states kept by a verify pass: 1 + k tokens, k <= 8


def capacity_for(n):
    """The KV capacity that holds n positions: 64, 128, 256, ... (n=300 -> 512)."""
    return max(MIN_CAPACITY, 1 << max(0, n - 1).bit_length())


@dataclass(eq=False)        # identity, not tensor-by-tensor comparison
class AttentionState:
    k: torch.Tensor = None       # (B, kv_heads, capacity, head_dim)
    v: torch.Tensor = None       # (B, kv_heads, capacity, head_dim)
    n: int = 0                   # valid positions

    def length(self):
        return self.n

    def reserve(self, cfg, batch, n, dtype, device):
        """Make room for n positions (the buffers grow to the next power of two, keeping their content)."""
        if self.k is not None and self.k.shape[2] >= n:
            return
        shape = (batch, cfg.num_key_value_heads, capacity_for(n), cfg.head_dim)
        k, v = torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)
        if self.k is not None:
            k[:, :, :self.n], v[:, :, :self.n] = self.k[:, :, :self.n], self.v[:, :, :self.n]
        self.k, self.v = k, v

    def write(self, positions, k, v):
        """Store new columns (B, kv_heads, T, head_dim) at `positions` (T,); return the whole buffers.
        subtle: positions is a tensor, not an int, so one compiled step serves every position."""
        self.k.index_copy_(2, positions, k.to(self.k.dtype))
        self.v.index_copy_(2, positions, v.to(self.v.dtype))
        return self.k, self.v

    def valid(self):
        """The filled part: k, v each (B, kv_heads, length, head_dim)."""
        return self.k[:, :, :self.n], self.v[:, :, :self.n]

    def truncate(self, n):
        """Forget every position from n on."""
        self.n = min(self.n, n)

    def nbytes(self):
        return 0 if self.k is None else self.k.nbytes + self.v.nbytes


@dataclass(eq=False)
class DeltaNetState:
    conv: torch.Tensor = None        # (B, conv_dim, K-1)
    S: torch.Tensor = None           # (B, value_heads, key_dim, value_dim)
    keep_steps: bool = False         # when set, the next forward also records the state after each token
    conv_steps: torch.Tensor = None  # (slots, B, conv_dim, K-1)
    S_steps: torch.Tensor = None     # (slots, B, value_heads, key_dim, value_dim)

    def allocate(self, cfg, batch, dtype, device):
        """Zero conv window and memory (what a layer that has seen nothing holds)."""
        conv_dim = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + \
            cfg.linear_num_value_heads * cfg.linear_value_head_dim
        self.conv = torch.zeros(batch, conv_dim, cfg.linear_conv_kernel_dim - 1, dtype=dtype, device=device)
        self.S = torch.zeros(batch, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                             cfg.linear_value_head_dim, dtype=torch.float32, device=device)
        # subtle: the slots exist from the start, with one size, so every state looks the same to a compiled step
        self.conv_steps = self.conv.new_zeros(STEP_SLOTS, *self.conv.shape)   # (slots, B, conv_dim, K-1)
        self.S_steps = self.S.new_zeros(STEP_SLOTS, *self.S.shape)            # (slots, B, heads, Dk, Dv)

    def nbytes(self):
        return sum(t.nbytes for t in (self.conv, self.S) if t is not None)


class State:
    def __init__(self, model, capacity=0):
        """capacity: KV positions to allocate at the first pass (e.g. prompt + new tokens), so a
        generation never reallocates; more are still made room for, in powers of two."""
        self.capacity = capacity
        self.cfg = getattr(model, "cfg", model)
        weight = model.embed_tokens.weight if hasattr(model, "embed_tokens") else None
        self.dtype = weight.dtype if weight is not None else torch.float32
        self.device = weight.device if weight is not None else torch.device("cpu")
        self.pos = 0
        self.pad = None
        self.batch = None
        self.layers = [AttentionState() if t == "full_attention" else DeltaNetState() for t in self.cfg.layer_types]

    def attention_layers(self):
        return [s for s in self.layers if isinstance(s, AttentionState)]

    def deltanet_layers(self):
        return [s for s in self.layers if isinstance(s, DeltaNetState)]

    def keeping(self):
        """Does the next pass record step states (keep_step_states)?"""
        return any(s.keep_steps for s in self.deltanet_layers())

    def begin_pass(self, ids):
        """Before a pass over ids (B, T): allocate or grow the buffers; -> the positions (T,) it fills."""
        B, T = ids.shape
        if self.batch is None:
            self.batch = B
            for s in self.deltanet_layers():
                s.allocate(self.cfg, B, self.dtype, self.device)
        elif B != self.batch:
            raise ValueError(f"this state holds {self.batch} rows, the pass has {B}")
        for s in self.attention_layers():
            s.reserve(self.cfg, B, max(self.capacity, self.pos + T), self.dtype, self.device)
        return torch.arange(self.pos, self.pos + T, device=ids.device)

    def end_pass(self, T):
        """After a pass of T tokens: they are now part of the history."""
        self.pos += T
        for s in self.attention_layers():
            s.n = self.pos


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


def copy_state(state):
    """A State whose buffers are copies of `state`'s: a pass over it leaves the original as it was."""
    twin = copy.copy(state)
    twin.layers = [type(s)(**{name: value.clone() if isinstance(value, torch.Tensor) else value
                              for name, value in vars(s).items()}) for s in state.layers]
    return twin


def restore_state(state, snap):
    """Go back to the snapshot: truncate KV caches, copy the saved memories back into place."""
    state.pos = snap.pos
    for s, n in zip(state.attention_layers(), snap.kv_lengths):
        s.truncate(n)
    for s, (conv, S) in zip(state.deltanet_layers(), snap.recurrent):
        s.conv.copy_(conv)
        s.S.copy_(S)


def truncate_kv(cache, n):
    """Truncate KV caches (a State's, or a single AttentionState) to their first n positions, in place."""
    layers = cache.attention_layers() if isinstance(cache, State) else [cache]
    for s in layers:
        s.truncate(n)


def keep_step_states(state, tokens=STEP_SLOTS, on=True):
    """Ask every DeltaNet layer to record its memory and conv window after each token of the next pass,
    into slots allocated once and reused: STEP_SLOTS of them (a verify pass of 1 + k, k <= 8), more for a
    draft tree's rows (the slots then grow, and a compiled step would see new shapes: trees run eagerly)."""
    for s in state.deltanet_layers():
        s.keep_steps = on
        if on and s.S_steps is not None and tokens > s.S_steps.shape[0]:
            s.conv_steps = s.conv.new_zeros(tokens, *s.conv.shape)
            s.S_steps = s.S.new_zeros(tokens, *s.S.shape)


def select_step_states(state, start, rows):
    """After a pass that began at position `start` with keep_step_states on, keep only some of its tokens,
    in place: its first n (rows = n, a chain), or a draft tree's accepted path (rows = [0, ..., r]).
    Each DeltaNet layer takes the memory and conv window recorded after the last kept token; a path's KV
    columns (slots start + row) move to start, start + 1, ...; KV caches are cut after them.

    subtle: no recomputation — the states after every token were kept during the pass."""
    path = list(range(rows)) if isinstance(rows, int) else list(rows)
    if not path:
        raise ValueError("select_step_states keeps at least the pass's first token (n >= 1)")
    if path != list(range(len(path))):                       # a tree's path: gather its KV columns
        for s in state.attention_layers():
            source = torch.tensor([start + r for r in path], device=s.k.device)
            target = torch.arange(start, start + len(path), device=s.k.device)
            s.k.index_copy_(2, target, s.k.index_select(2, source))   # gathered first: a source is never
            s.v.index_copy_(2, target, s.v.index_select(2, source))   # an earlier target (row >= depth)
    state.pos = start + len(path)
    truncate_kv(state, start + len(path))
    take_step_states(state, path[-1])
    for s in state.deltanet_layers():
        s.keep_steps = False


def take_step_states(state, row):
    """Each DeltaNet layer's memory and conv window := those kept after row `row` of the last pass, in place. row: a
    number, or a (1,) long tensor inside a compiled round, where reading it as a number would end the graph."""
    for s in state.deltanet_layers():
        if isinstance(row, torch.Tensor):
            s.conv.copy_(s.conv_steps.index_select(0, row)[0])
            s.S.copy_(s.S_steps.index_select(0, row)[0])
        else:                                     # a view, no gather: the step-by-step round's select
            s.conv.copy_(s.conv_steps[row])
            s.S.copy_(s.S_steps[row])
