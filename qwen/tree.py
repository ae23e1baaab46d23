"""Draft trees: more than one guess per position, verified in one pass of the main model.

A chain round guesses k tokens one after another and verifies [tok, d1..dk]. A tree round guesses
several candidates where the head is unsure: the head's top two at depth 1, say, and a child under the
first. Every node is one row of the verify pass, so the rows are no longer a sequence:

    shape "2+1":         tok                 rows: 0 tok, 1 a, 2 b, 3 c
                        /   \\                parents: (-1, 0, 0, 1)
                       a     b               row 3 (c) sees tok, a and itself; not b
                       |
                       c

On a hybrid model each kind of layer needs its own fix for that:
- attention: each row writes its own KV slot (P + row) but is rotated at its depth (P + depth) and
  sees the cache before P plus its ancestors' slots (an ancestor mask instead of the causal one);
  after acceptance the winning path's slots are moved to P, P+1, ... and the rest cut off;
- Gated DeltaNet: each node's memory is its *parent's* memory updated with its own token, and its conv
  window holds its ancestors' inputs. Row order would feed a sibling's token into the memory. Each
  depth is one batched recurrence step from the parents' states, and every node's state is kept, so
  the winning node's memory is selected (as `select` does for a chain) — or, with `recompute`, the
  state is restored and the winning path re-run.

    tree = parse_tree("2+1")         # or "2x2" (width per depth, every node), or parents [0, 0, 1]
    tokens, rounds, hits = generate_mtp(model, head, ids, tree="2x2")      # qwen.mtp: same output as plain

A qwen.tree.TreeWatch passed as generate_mtp's `trace` hears each round from the inside (the stepper's
tree mode records with one). Eager only (the compiled engine stays chain-only). Greedy decoding and
sampling with a seed (the drafts are the top candidates of the head's scores plus the shared noise;
verification is coupled as for a chain), so the output is token-identical to plain decoding.
"""
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F

from qwen.cache import restore_state, snapshot_state, truncate_kv
from qwen.deltanet import l2_normalize
from qwen.rope import rope_tables
from qwen.sample import coupled_pick, filtered_logits, gumbel_noise, pick_token, probs_from_logits

MAX_NODES = 16               # draft nodes per tree (the root, the round's first token, not counted)


@dataclass(frozen=True)
class Tree:
    """A draft tree's shape: parents[i] is node i's parent (node 0, the root, has -1). A parent comes
    before its children, and a node's children are its parent's guesses in rank order (first = top-1)."""
    parents: tuple

    @cached_property
    def depths(self):
        out = [0]
        for parent in self.parents[1:]:
            out.append(out[parent] + 1)
        return tuple(out)

    @cached_property
    def children(self):
        out = [[] for _ in self.parents]
        for node, parent in enumerate(self.parents[1:], start=1):
            out[parent].append(node)
        return tuple(tuple(c) for c in out)

    @property
    def size(self):
        """Rows of the verify pass: the root and every draft node."""
        return len(self.parents)

    @property
    def depth(self):
        """Drafts on the longest path (a chain of k drafts has depth k)."""
        return max(self.depths)

    def ancestors(self, node):
        """The path from the root to node, both included: [0, ..., node]."""
        path = [node]
        while path[-1] != 0:
            path.append(self.parents[path[-1]])
        return path[::-1]

    def is_chain(self):
        return all(parent == node - 1 for node, parent in enumerate(self.parents[1:], start=1))


def parse_tree(shape):
    """A Tree from "2x2" (width per depth: every node at depth d has w_{d+1} children), "2+1" (the root
    has 2 children; below, only the first node of each depth has children: 1 here), a list of parent
    indices for nodes 1.. ([0, 0, 1]: 0 is the root), or a Tree. A chain of k drafts is "1+1+..." (k ones)."""
    if isinstance(shape, Tree):
        return shape
    if isinstance(shape, (list, tuple)):
        parents = (-1,) + tuple(int(p) for p in shape)
    elif isinstance(shape, str) and shape.strip():
        text = shape.replace(" ", "").lower()
        full = "x" in text
        try:
            widths = [int(w) for w in text.split("x" if full else "+")]
        except ValueError:
            raise ValueError(f"a tree shape is widths joined by 'x' or '+' (\"2x2\", \"2+1\"), not {shape!r}") from None
        if full and "+" in text or any(w < 1 for w in widths):
            raise ValueError(f"a tree shape is positive widths joined by one of 'x' or '+', not {shape!r}")
        parents, level = [-1], [0]
        for width in widths:
            expanded = level if full else level[:1]                # "+": only the first node grows
            level = []
            for node in expanded:
                for _ in range(width):
                    parents.append(node)
                    level.append(len(parents) - 1)
        parents = tuple(parents)
    else:
        raise ValueError(f"a tree shape is a string such as \"2x2\" or \"2+1\", or a list of parents, not {shape!r}")
    if not 1 < len(parents) <= MAX_NODES + 1:
        raise ValueError(f"a draft tree has 1 to {MAX_NODES} nodes, not {len(parents) - 1} ({shape!r})")
    for node, parent in enumerate(parents[1:], start=1):
        if not 0 <= parent < node:
            raise ValueError(f"node {node}'s parent must be an earlier node (0 = the round's first token), not {parent}")
    return Tree(parents)


# ---------------------------------------------------------------------------------------------- drafting

@dataclass
class Node:
    """A drafted node: its token, the head output that guessed it (the head's input below it), the
    head's probability of it, and its rank among its siblings (0 = the head's first choice)."""
    token: int
    out: torch.Tensor            # (1, 1, H)
    prob: float
    rank: int


def candidates(scores, width, sampling, position):
    """The `width` best guesses from one head output's scores (logits (V',), column token ids or None):
    the first as a chain's guess is made (pick_token), the others by rank of the same scores, plus the
    shared noise where sampling with a seed. -> [(token id, the head's probability of it)]"""
    logits, cols = scores
    first = int(pick_token(logits[None], **sampling, position=position, cols=cols)[0])
    ranked = logits.float()
    if sampling.get("temperature"):
        ranked = filtered_logits(ranked, sampling["temperature"], sampling.get("top_k"), sampling.get("top_p")) + \
            gumbel_noise(sampling["seed"], [position], ranked.shape[-1] if cols is None else cols, logits.device)[0]
    order = [first] + ([c for c in ranked.topk(min(width + 1, ranked.shape[-1])).indices.tolist() if c != first]
                       if width > 1 else [])
    probs = probs_from_logits(logits, sampling.get("temperature") or 1.0)
    return [(int(cols[c]) if cols is not None else c, float(probs[c])) for c in order[:width]]


def draft_tree(mtp, model, tree, first, P, head_cache, sampling):
    """Draft every node of `tree` for a round whose first token is at position P; first: the qwen.mtp
    Guess of the token after it (its scores give the depth-1 candidates). Nodes are expanded depth
    first, so the head's cache always holds the current node's ancestors (written by position).
    -> [Node] for nodes 1.. (None at index 0, the root)"""
    nodes = [None] * tree.size

    def expand(node, scores, out):               # the children of `node` from the head's scores after it
        depth = tree.depths[node] + 1                              # the children's; they sit at P + depth
        picks = candidates(scores, len(tree.children[node]), sampling, P + depth)
        for rank, (child, (token, prob)) in enumerate(zip(tree.children[node], picks)):
            nodes[child] = Node(token, out, prob, rank)
            if tree.children[child]:
                # the head at P + depth pairs (its own output standing in for h, the child's token), as in a chain
                logits, cols, child_out = mtp.draft(model, out, torch.tensor([[token]], device=out.device),
                                                    P + depth - 1, head_cache)
                expand(child, (logits[0], cols), child_out)

    expand(0, first.scores, first.out)
    return nodes


# ---------------------------------------------------------------------------------------------- verifying

def ancestor_mask(tree, start, capacity, device):
    """Which key slots each row may see: the cache before `start`, then its ancestors' slots (each row
    writes slot start + row). -> (1, 1, rows, capacity) bool. For a chain: the causal mask."""
    rows = tree.size
    seen = torch.zeros(rows, capacity, dtype=torch.bool, device=device)
    seen[:, :start] = True
    for row in range(rows):
        seen[row, [start + a for a in tree.ancestors(row)]] = True
    return seen[None, None]


def path_windows(tree, kernel):
    """For each row, the K inputs its causal conv reads: indices into [the state's K-1 last inputs,
    then the pass's rows], its ancestors' rows instead of the rows before it. -> (rows, K) long"""
    windows = []
    for row in range(tree.size):
        seen = list(range(kernel - 1)) + [kernel - 1 + a for a in tree.ancestors(row)]
        windows.append(seen[-kernel:])
    return torch.tensor(windows)


def tree_deltanet(layer, x, cache, tree):
    """A Gated DeltaNet layer over the tree's rows x (1, rows, H): as layer.forward, but each row's conv
    window and memory follow its own ancestors. The state is left holding the last row's (what a pass
    in row order would leave: wrong for any other winner). -> (output (1, rows, H), each row's conv
    window (rows, 1, C, K-1) and memory (rows, 1, nv, dk, dv) after it)"""
    B, T, _ = x.shape
    K = layer.kernel
    inputs = torch.cat([cache.conv.to(x.dtype), layer.in_proj_qkv(x).transpose(1, 2)], dim=-1)    # (1, C, K-1+T)
    index = path_windows(tree, K).to(x.device)                                                     # (T, K)
    windows = inputs[:, :, index.reshape(-1)].view(B, -1, T, K)                                    # (1, C, T, K)
    conv_after = windows[:, :, :, 1:].permute(2, 0, 1, 3)                                          # (T, 1, C, K-1)
    qkv = F.silu((windows * layer.conv1d.weight[:, None, 0, :]).sum(-1)).transpose(1, 2)           # (1, T, C)
    q, k, v = qkv.split([layer.nk * layer.dk, layer.nk * layer.dk, layer.nv * layer.dv], dim=-1)
    q = l2_normalize(q.reshape(B, T, layer.nk, layer.dk))
    k = l2_normalize(k.reshape(B, T, layer.nk, layer.dk))
    v = v.reshape(B, T, layer.nv, layer.dv).float()
    if layer.nv != layer.nk:
        q = q.repeat_interleave(layer.nv // layer.nk, dim=2)
        k = k.repeat_interleave(layer.nv // layer.nk, dim=2)
    beta = torch.sigmoid(layer.in_proj_b(x).float())
    g = -layer.A_log.float().exp() * F.softplus(layer.in_proj_a(x).float() + layer.dt_bias.float())
    q, k, v, beta, g = (t.transpose(1, 2) for t in (q, k, v, beta, g))          # (1, nv, T, ...) heads first
    out, S_after = tree_delta_rule(q, k, v, g, beta, cache.S, tree)
    cache.conv.copy_(conv_after[-1])
    cache.S.copy_(S_after[-1])
    out = out.transpose(1, 2).to(x.dtype)                                         # (1, T, nv, dv)
    z = layer.in_proj_z(x).view(B, T, layer.nv, layer.dv)
    return layer.out_proj(layer.norm(out, z).reshape(B, T, -1)), conv_after, S_after


def tree_delta_rule(q, k, v, g, beta, S, tree):
    """The gated delta rule (deltanet.delta_rule_recurrent's arithmetic, one token per node) on a tree:
    each node's memory is its parent's updated with its own token; the nodes of one depth go as one
    batch. q, k: (1, H, T, Dk); v: (1, H, T, Dv); g, beta: (1, H, T); S: (1, H, Dk, Dv) before the root.
    -> out (1, H, T, Dv), each node's memory after it (T, 1, H, Dk, Dv)"""
    _, H, T, Dk = k.shape
    q = q * Dk ** -0.5
    out = q.new_zeros(1, H, T, v.shape[-1])
    after = [None] * T
    for depth in range(tree.depth + 1):
        rows = [r for r in range(T) if tree.depths[r] == depth]
        before = S if depth == 0 else torch.cat([after[tree.parents[r]] for r in rows])      # (n, H, Dk, Dv)
        pick = torch.tensor(rows, device=q.device)

        def at(t):                                                  # (1, H, n, ...) -> (n, H, 1, ...)
            return t.index_select(2, pick).transpose(0, 2)
        k_t, q_t, v_t = at(k), at(q), at(v)                          # (n, H, 1, D)
        decay = at(g[..., None]).exp()                               # (n, H, 1, 1)
        read = torch.cat([k_t, q_t], dim=2) @ before                 # (n, H, 2, Dv)
        delta = (v_t - decay * read[:, :, :1]) * at(beta[..., None])
        new = torch.addcmul(before * decay, k_t.transpose(-1, -2), delta)
        o = decay * read[:, :, 1:] + (q_t * k_t).sum(-1, keepdim=True) * delta    # (n, H, 1, Dv)
        out.index_copy_(2, pick, o.transpose(0, 2))
        for i, r in enumerate(rows):
            after[r] = new[i:i + 1]
    return out, torch.stack(after)


def tree_attention(attn, x, cos, sin, cache, slots, mask):
    """A gated attention layer over the tree's rows: each row writes KV slot `slots[row]`, rotated at its
    depth (cos, sin), and sees what `mask` lets it. -> (1, rows, H)"""
    q, k, v, gate = attn.project(x, cos, sin)
    k, v = cache.write(slots, k, v)
    return attn.attend(q, k, v, gate, mask)


def tree_pass(model, tokens, state, tree):
    """The main model over a tree's rows (tokens (1, rows), row 0 the round's first token at state.pos):
    one pass, every row seeing only its ancestors. The KV cache holds the rows in slots pos.., the
    DeltaNet states the last row's. -> (logits (1, rows, V), hidden (1, rows, H), [per DeltaNet layer:
    (conv windows, memories) after each row])"""
    P, T = state.pos, tree.size
    state.begin_pass(tokens)                                       # allocates / grows the buffers
    device = tokens.device
    slots = torch.arange(P, P + T, device=device)
    cos, sin = rope_tables(model.cfg, P + torch.tensor(tree.depths, device=device))
    mask = None
    x, kept = model.embed_tokens(tokens), []
    for layer, cache in zip(model.layers, state.layers):
        h = layer.input_layernorm(x)
        if layer.kind == "linear_attention":
            h, conv_after, S_after = tree_deltanet(layer.linear_attn, h, cache, tree)
            kept.append((conv_after, S_after))
        else:
            if mask is None:
                mask = ancestor_mask(tree, P, cache.k.shape[2], device)
            h = tree_attention(layer.self_attn, h, cos, sin, cache, slots, mask)
        x = x + h
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    hidden = model.norm(x)
    state.end_pass(T)
    return model.lm_head(hidden), hidden, kept


def choices(logits, tree, P, sampling):
    """What the main model emits after each row: its argmax, or the coupled sample at the row's position
    (P + depth + 1). -> list of token ids"""
    if not sampling.get("temperature"):
        return logits.argmax(-1).tolist()
    positions = [P + d + 1 for d in tree.depths]
    return coupled_pick(logits, sampling["seed"], positions, sampling["temperature"], sampling.get("top_k"),
                        sampling.get("top_p")).tolist()


def walk(tree, nodes, picks):
    """From the root, follow the child whose token is the main model's pick, while there is one.
    -> (the accepted path of rows [0, ...], the main model's next token after its last node)"""
    path = [0]
    while True:
        child = next((c for c in tree.children[path[-1]] if nodes[c].token == picks[path[-1]]), None)
        if child is None:
            return path, picks[path[-1]]
        path.append(child)


def move_path_kv(state, P, path):
    """Move the winning path's KV columns (slots P + row) to positions P, P+1, ... and cut the rest."""
    for s in state.attention_layers():
        source = torch.tensor([P + r for r in path], device=s.k.device)
        target = torch.arange(P, P + len(path), device=s.k.device)
        s.k.index_copy_(2, target, s.k.index_select(2, source))       # gathered first: a source is never
        s.v.index_copy_(2, target, s.v.index_select(2, source))       # an earlier target (row >= depth)
    truncate_kv(state, P + len(path))
    state.pos = P + len(path)


def select_tree_state(state, kept, row):
    """`select` for a tree: every DeltaNet layer takes the conv window and memory kept after `row`."""
    for s, (conv_after, S_after) in zip(state.deltanet_layers(), kept):
        s.conv.copy_(conv_after[row])
        s.S.copy_(S_after[row])


class TreeWatch:
    """Hears a tree round from the inside (pass one as generate_mtp's `trace` with a tree; the stepper's tree
    mode records with one). Each method is called inside the round, so it may read the state but must leave
    it as it found it."""

    def drafted(self, state, tree, tokens, nodes):
        """Before the verify pass: `state` as the round found it; tokens (1, rows): the root and every draft."""

    def verified(self, state, logits, kept, picks, path):
        """After the verify pass, before the rollback: logits (1, rows, V); kept: per DeltaNet layer (conv
        windows, memories) after each row (tree_pass); picks: the main model's token after each row; path: the
        accepted rows."""

    def rolled_back(self, state):
        """After the rollback: the state the next round starts from."""


@dataclass
class TreeRound:
    """What one tree round did (qwen.mtp.Round's fields that the decoding loop reads, and the tree)."""
    pos: int
    tree: Tree
    nodes: list                  # [None, Node, ...]: each row's draft
    picks: list                  # the main model's token after each row
    path: list                   # accepted rows, [0, ...]
    drafts: list                 # the accepted drafts' tokens, in order
    accepted: int
    next_token: int
    bonus: bool                  # the last accepted node is a leaf: the next token extends the whole path
    next_guess: object           # qwen.mtp.Guess for the next round
    seconds: dict


def tree_round(model, mtp, state, head_cache, tok, first, tree, rollback, sampling, clock, guess, watch=None):
    """One round with a draft tree: draft every node, verify all rows in one pass, walk the longest
    accepted path, roll the state back to it, and let the head catch up with `guess` (qwen.mtp's, which
    imports this module). watch: a TreeWatch, or None. -> TreeRound"""
    P, device = state.pos, head_cache.k.device
    nodes = draft_tree(mtp, model, tree, first, P, head_cache, sampling)
    clock.lap("draft")
    snap = snapshot_state(state) if rollback == "recompute" else None
    clock.lap("snapshot")
    tokens = torch.tensor([[tok] + [n.token for n in nodes[1:]]], device=device)     # (1, rows)
    if watch is not None:
        watch.drafted(state, tree, tokens, nodes)
    logits, hidden, kept = tree_pass(model, tokens, state, tree)
    clock.lap("verify")
    picks = choices(logits[0], tree, P, sampling)
    path, nxt = walk(tree, nodes, picks)
    if watch is not None:
        watch.verified(state, logits, kept, picks, path)
    n = len(path) - 1
    in_place = path == list(range(tree.size))                        # a chain all accepted: nothing to undo
    if rollback == "select":
        select_tree_state(state, kept, path[-1])
        move_path_kv(state, P, path)
    elif rollback == "recompute" and not in_place:
        restore_state(state, snap)
        clock.lap("restore")
        model.forward_hidden(tokens[:, path], state)
        clock.lap("rerun")
    elif not in_place:                   # "none": KV cut to the path's length, the last row's memory kept
        truncate_kv(state, P + n + 1)
        state.pos = P + n + 1
    clock.lap("restore")
    if watch is not None:
        watch.rolled_back(state)
    # the head catches up along the path, then guesses the next round's first draft; it runs depth + 1
    # rows as a chain's catch-up runs k + 1 (the rows past n are overwritten before anything reads them)
    rows = path + [c for c in first_children(tree, path[-1])]
    rows += [rows[-1]] * (tree.depth + 1 - len(rows))
    catch_up = [nodes[r].token for r in path[1:]] + [nxt] + [nodes[r].token for r in rows[n + 1:]]
    head_cache.truncate(P)
    next_guess = guess(mtp, model, hidden[:, rows], torch.tensor([catch_up[:tree.depth + 1]], device=device),
                       P, head_cache, sampling, row=n)
    head_cache.truncate(P + n + 1)
    clock.lap("draft")
    return TreeRound(P, tree, nodes, picks, path, [nodes[r].token for r in path[1:]], n, nxt,
                     not tree.children[path[-1]], next_guess, clock.seconds)


def first_children(tree, node):
    """The rows below `node` following first children (the head's top guess) to a leaf."""
    rows = []
    while tree.children[node]:
        node = tree.children[node][0]
        rows.append(node)
    return rows


def check_tree_sampling(sampling):
    """Trees verify greedy decoding and sampling with a seed (coupled); the textbook rejection rule for
    several drafts per position is another algorithm, not built here."""
    if sampling.get("temperature") and sampling.get("seed") is None:
        raise ValueError("a draft tree samples with a seed (shared noise, seed=...); without one only chains sample")
