"""The shape of a round's guesses, and drafting them: a chain of k guesses is the tree with one child per node.

A chain round guesses k tokens one after another and verifies [tok, d1..dk]. A tree round guesses several
candidates where the head is unsure: the head's top two at depth 1, say, and a child under the first.
Every node is one row of the verify pass; node 0 is the round's first token:

    chain "1+1" (k=2):   tok - d1 - d2       parents (-1, 0, 1): each row's parent is the row before it
    tree  "2+1":         tok                 parents (-1, 0, 0, 1)
                        /   \\                row 3 (c) sees tok, a and itself; not b
                       a     b
                       |
                       c

The model runs the rows in one pass, each seeing only its ancestors (qwen.model, `tree=`): attention through
an ancestor mask (`Tree.seen`; a chain's is the causal mask), DeltaNet's conv through each row's ancestors'
inputs (`Tree.conv_reads`) and its recurrence from each row's parent's memory. Accepting walks from the root
along the children the main model agrees with (`walk`); for a chain that is the longest agreeing prefix.

    tree = parse_tree("2+1")         # or "2x2" (width per depth, every node), or parents [0, 0, 1]
    Tree.chain(2)                    # the chain of k=2 drafts: what generate_mtp(k=2) drafts
    tokens, rounds, hits = generate_mtp(model, head, ids, tree="2x2")      # qwen.mtp: same output as plain
"""
from dataclasses import dataclass
from functools import cached_property, lru_cache

import torch

from qwen.sample import filtered_logits, gumbel_noise, pick_token, probs_from_logits

MAX_NODES = 16               # draft nodes per tree (the root, the round's first token, not counted)


@dataclass(frozen=True)
class Tree:
    """A draft tree's shape: parents[i] is node i's parent (node 0, the root, has -1). A parent comes
    before its children, and a node's children are its parent's guesses in rank order (first = top-1)."""
    parents: tuple

    @staticmethod
    @lru_cache(maxsize=None)
    def chain(k):
        """The chain of k drafts: every row's parent is the row before it (one Tree per k, made once)."""
        return Tree(tuple(range(-1, k)))

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
        return self.parents == tuple(range(-1, self.size - 1))

    @cached_property
    def seen(self):
        """seen[row][col]: may row `row` see row `col` (an ancestor, or itself)? For a chain: col <= row."""
        return tuple(tuple(col in self.ancestors(row) for col in range(self.size)) for row in range(self.size))

    @lru_cache(maxsize=8)
    def conv_reads(self, kernel):
        """For each row, the `kernel` inputs its causal conv reads, as indices into [the conv window's K-1
        inputs from before the round, then the pass's rows]: its ancestors' rows where a chain reads the
        rows before it. -> (rows, K) nested tuples"""
        return tuple(tuple((list(range(kernel - 1)) + [kernel - 1 + a for a in self.ancestors(row)])[-kernel:])
                     for row in range(self.size))

    def first_children(self, node):
        """The rows below `node` following first children (the head's top guess) to a leaf."""
        rows = []
        while self.children[node]:
            node = self.children[node][0]
            rows.append(node)
        return rows


@lru_cache(maxsize=64)
def tree_tensor(values, device):
    """A tree's nested tuple (Tree.seen, Tree.conv_reads(K), Tree.depths) as a tensor on `device`, made once:
    a verify pass reads the same few per layer, every round."""
    return torch.tensor(values, device=device)


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


def walk(tree, tokens, picks):
    """From the root, follow the child whose token is the main model's pick, while there is one.
    tokens: each row's token; picks: the main model's token after each row.
    -> (the accepted path of rows [0, ...], the main model's next token after its last node)"""
    path = [0]
    while True:
        child = next((c for c in tree.children[path[-1]] if tokens[c] == picks[path[-1]]), None)
        if child is None:
            return path, picks[path[-1]]
        path.append(child)


# ---------------------------------------------------------------------------------------------- drafting

@dataclass
class Guess:
    """The head's guess for one position: the token, its distribution q over the whole vocabulary (None unless
    sampling by the textbook rule, its one reader), the head's output that scored it (1, 1, H), the scores as
    computed (logits (V',), token ids of those columns or None) and its rank among its siblings (0 = the head's first choice)."""
    token: int
    q: torch.Tensor
    out: torch.Tensor
    scores: tuple
    rank: int = 0

    def prob(self, temperature=0):
        """The head's probability of this token (at `temperature`, unfiltered; 1.0 when greedy)."""
        logits, cols = self.scores
        probs = probs_from_logits(logits, temperature or 1.0)
        column = self.token if cols is None else int((cols == self.token).nonzero()[0, 0])
        return float(probs[column])


def guess(mtp, model, hidden, tokens, start, cache, sampling, row=-1):
    """One head pass and a guess from its output at row `row`. hidden: (1, T, H); tokens: (1, T) -> Guess"""
    logits, cols, out = mtp.draft(model, hidden, tokens, start, cache, row)        # logits (1, V')
    position = start + (row if row >= 0 else tokens.shape[1] + row) + 2       # of the guessed token
    token = int(pick_token(logits, **sampling, position=position, cols=cols)[0])
    q = None
    if sampling.get("temperature") and sampling.get("seed") is None:   # the textbook rule's q, over every token
        q = probs_from_logits(logits[0], sampling["temperature"], sampling.get("top_k"), sampling.get("top_p"))
        q = q if cols is None else torch.zeros(model.cfg.vocab_size, device=q.device).index_add_(0, cols, q)
    return Guess(int(cols[token]) if cols is not None else token, q, out, (logits[0], cols))


def runners_up(first, width, sampling, position):
    """The head's next `width - 1` choices from the scores that gave `first`, best first: by score, plus
    the shared noise at `position` where sampling with a seed (the order pick_token's rule ranks them in)."""
    logits, cols = first.scores
    ranked = logits.float()
    if sampling.get("temperature"):
        ranked = filtered_logits(ranked, sampling["temperature"], sampling.get("top_k"), sampling.get("top_p")) + \
            gumbel_noise(sampling["seed"], [position], ranked.shape[-1] if cols is None else cols, logits.device)[0]
    columns = ranked.topk(min(width + 1, ranked.shape[-1])).indices.tolist()
    tokens = [int(cols[c]) if cols is not None else c for c in columns]
    return [Guess(t, None, first.out, first.scores, rank) for rank, t in
            enumerate([t for t in tokens if t != first.token][:width - 1], start=1)]


def draft(mtp, model, tree, first, P, head_cache, sampling):
    """Guess every node of `tree` for a round whose first token is at position P; first: the head's guess
    of the token after it (from the last round's catch-up). A node's first child is the head's pick (as a
    chain's guess is made), the others its runners-up; a node with children feeds the head its token and the
    output that guessed it. Nodes are expanded depth first, so the head's cache holds the current node's
    ancestors (written by position). -> [None (the root), Guess for node 1, ...]"""
    guesses = [None] * tree.size

    def expand(node, best):                      # the children of `node`, `best` the head's pick after it
        depth = tree.depths[node] + 1                              # the children's; they sit at P + depth
        children = tree.children[node]
        for child, g in zip(children, [best] + (runners_up(best, len(children), sampling, P + depth)
                                                if len(children) > 1 else [])):
            guesses[child] = g
            if tree.children[child]:
                # the head at P + depth - 1 pairs (its own output standing in for h, the child's token)
                expand(child, guess(mtp, model, g.out, torch.tensor([[g.token]], device=g.out.device),
                                    P + depth - 1, head_cache, sampling))

    expand(0, first)
    return guesses
