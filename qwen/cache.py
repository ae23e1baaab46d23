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
                         conv_steps: (slots, B, conv_dim, K-1)  the conv window after each token of a pass,
                         row_decay, row_k, row_delta: (slots, B, value_heads, 1, 1 | key_dim | value_dim)
                           each token's write into the memory (deltanet.write_row),
                         all filled only when keep_step_states asked for them

Rolling back is where the two kinds differ. A KV cache holds one column per position, so going back
to position n is setting its length to n (the columns after it are overwritten before anyone reads
them). The DeltaNet memory is a running sum that every token rewrote in place of the old one; there
is nothing to cut. It has to be copied before (snapshot / restore), or kept after each of the
positions we may want to return to. `select` does the second without a copy of the memory per
position: a pass that keeps step states (keep_step_states) leaves the memory as it was and keeps each
token's write instead (three small vectors per head); once the round knows how many tokens it keeps,
select_step_states writes theirs (the memory after any position is S with the writes up to it).

Every verb here changes `state` in place, and says so in its name.
"""
import copy
import dataclasses
from dataclasses import dataclass

import torch

MIN_CAPACITY = 64            # KV capacity grows in powers of two from here: few distinct shapes
STEP_SLOTS = 9               # per-token states kept by a verify pass: 1 + k tokens, k <= 8


def write_row(S, decay, k_t, delta, in_place=False):
    """One token's write into DeltaNet memories S (N, H, Dk, Dv): decay (N, H, 1, 1), k_t (N, H, 1, Dk),
    delta (N, H, 1, Dv) -> decayed S + k delta^T (in_place: into S itself). The one place a memory is written:
    each token of a pass (qwen.deltanet.delta_rule_step), and a round's commit redoing the writes a verify pass
    kept (take_step_states), bit for bit the same arithmetic."""
    if in_place:
        return S.mul_(decay).addcmul_(k_t.transpose(-1, -2), delta)
    return torch.addcmul(S * decay, k_t.transpose(-1, -2), delta)


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
    keep_steps: bool = False         # when set, the next forward keeps each token's write instead of writing S
    conv_steps: torch.Tensor = None  # (slots, B, conv_dim, K-1): the window after each token
    row_decay: torch.Tensor = None   # (slots, B, value_heads, 1, 1)   each token's write: decay,
    row_k: torch.Tensor = None       # (slots, B, value_heads, 1, key_dim)  key
    row_delta: torch.Tensor = None   # (slots, B, value_heads, 1, value_dim)  and delta (deltanet.write_row)

    def allocate(self, cfg, batch, dtype, device):
        """Zero conv window and memory (what a layer that has seen nothing holds)."""
        conv_dim = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + \
            cfg.linear_num_value_heads * cfg.linear_value_head_dim
        self.conv = torch.zeros(batch, conv_dim, cfg.linear_conv_kernel_dim - 1, dtype=dtype, device=device)
        self.S = torch.zeros(batch, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                             cfg.linear_value_head_dim, dtype=torch.float32, device=device)
        # subtle: the slots exist from the start, with one size, so every state looks the same to a compiled step
        self.make_slots(STEP_SLOTS)

    def make_slots(self, slots):
        """Room for `slots` tokens' conv windows and memory writes (zeros)."""
        B, heads, Dk, Dv = self.S.shape
        self.conv_steps = self.conv.new_zeros(slots, *self.conv.shape)       # (slots, B, conv_dim, K-1)
        self.row_decay = self.S.new_zeros(slots, B, heads, 1, 1)
        self.row_k = self.S.new_zeros(slots, B, heads, 1, Dk)
        self.row_delta = self.S.new_zeros(slots, B, heads, 1, Dv)

    def written(self, rows):
        """The memory with the kept writes of `rows` (of the last pass, in order) applied: a new tensor."""
        S = self.S
        for r in rows:
            S = write_row(S, self.row_decay[r], self.row_k[r], self.row_delta[r])
        return S

    def memories(self, parents):
        """The memory after each row of the last pass that kept step states, its rows shaped by `parents`
        (qwen.tree.Tree.parents; a chain's are -1, 0, 1, ...): (rows, B, heads, Dk, Dv), for views."""
        after = []
        for r, parent in enumerate(parents):
            before = self.S if parent < 0 else after[parent]
            after.append(write_row(before, self.row_decay[r], self.row_k[r], self.row_delta[r]))
        return torch.stack(after)

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
    """Ask every DeltaNet layer to keep, for each token of the next pass, its conv window and its write into
    the memory, leaving the memory as it was, into slots allocated once and reused: STEP_SLOTS of them (a
    verify pass of 1 + k, k <= 8), more for a draft tree's rows (the slots then grow, and a compiled step
    would see new shapes: trees run eagerly). A pass that keeps them must be followed by select_step_states
    (or take_step_states) before the memory is read as the sequence's."""
    for s in state.deltanet_layers():
        s.keep_steps = on
        if on and s.conv_steps is not None and tokens > s.conv_steps.shape[0]:
            s.make_slots(tokens)


def select_step_states(state, start, rows):
    """After a pass that began at position `start` with keep_step_states on, keep only some of its tokens,
    in place: its first n (rows = n, a chain), or a draft tree's accepted path (rows = [0, ..., r]).
    Each DeltaNet layer writes the kept tokens' writes into its memory and takes the conv window recorded
    after the last; a path's KV columns (slots start + row) move to start, start + 1, ...; KV caches are cut
    after them.

    subtle: no model pass — each kept token's write was kept during the pass."""
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
    take_step_states(state, path)
    for s in state.deltanet_layers():
        s.keep_steps = False


def take_step_states(state, rows, of=None):
    """Each DeltaNet layer's memory := itself with the kept writes of `rows` of the last pass applied, in
    order; its conv window := the one kept after the last of them; in place. rows: a path of row numbers
    (a chain's first n: 0, ..., n-1), or a (1,) long tensor n inside a compiled round, meaning rows 0..n of
    the pass's `of` rows, where reading n as a number would end the graph: there all `of` rows are written,
    those past n as a write of nothing (decay 1, delta 0), which leaves each value exactly as it was."""
    for s in state.deltanet_layers():
        if isinstance(rows, torch.Tensor):
            S = s.S
            for t in range(of):
                kept = torch.arange(t, t + 1, device=rows.device) <= rows                  # (1,) bool
                S = write_row(S, torch.where(kept, s.row_decay[t], 1.0), s.row_k[t],
                              torch.where(kept, s.row_delta[t], 0.0))
            s.S.copy_(S)
            s.conv.copy_(s.conv_steps.index_select(0, rows)[0])
        else:                                     # eager: each write in place, no copy of the memory
            for r in rows:
                write_row(s.S, s.row_decay[r], s.row_k[r], s.row_delta[r], in_place=True)
            s.conv.copy_(s.conv_steps[rows[-1]])


def written_through(state, rows):
    """`state` as a pass that keeps no step states would have left it: when the last pass kept them, a shallow
    copy whose DeltaNet memories have the writes of `rows` (the pass's last row and its ancestors) applied;
    otherwise `state` itself. For views of the state between a verify pass and its rollback (qwen.trace)."""
    if not state.keeping():
        return state
    twin = copy.copy(state)
    twin.layers = [dataclasses.replace(s, S=s.written(rows)) if isinstance(s, DeltaNetState) else s
                   for s in state.layers]
    return twin
