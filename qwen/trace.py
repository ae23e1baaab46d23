"""Hearing a speculative run from inside the engine (Watch), and what each round did as plain data (Trace).

generate_mtp(..., trace=w) calls a Watch's methods as each round runs, chain or tree alike: round_began,
drafted, verified, rolled_back, round_ended (and prefilled once). A Trace is the Watch that keeps one
record per round (lists, numbers, strings: JSON-ready, no tensors) and says which DeltaNet layer and head
to watch. Round 0 is the prefill. A round record:

    round, pos                 round number; position of the token the round starts from
    draft     [{token, prob, top: [[id, prob], ...]}]          the head's guess at each draft row
    verify    [{token, prob, draft_prob, match}]               main model after each row (draft_prob, match:
              of the row's child on the accepted path, else its first child; none for a leaf)
              (sampling with shared noise: each also has noise [[id, log q or log p, G], ...], the
              leading candidates by their sum, the first being the pick)
    parents, path              a draft tree only: each row's parent, the accepted rows (a chain has neither)
    decision                   k="auto" only: how the round chose its length (qwen.adaptive.decision)
    accepted, emitted [{token, origin}]                        origin: draft / correction / bonus
    rollback, seconds {draft, snapshot, verify, restore, rerun, catch_up}, snapshot_bytes
    states    {before, after_verify, after}: each {pos, kv: [...], head_kv, layers: [{index, kind, bytes}],
               memory: 2-D list (watched layer/head, downsampled), conv: 2-D list (channels x K-1)}

Nothing here runs unless a trace was asked for.
"""
import torch
import torch.nn.functional as F

from qwen.cache import AttentionState, written_through
from qwen.sample import filtered_logits, gumbel_noise

TOP = 5           # alternatives recorded per draft position
PHASES = ("prefill", "before", "after_verify", "after")     # when Trace.view is taken: the prompt's pass, a round's three
GRID = 24         # memory matrices and conv windows are averaged down to at most GRID rows / columns


class Watch:
    """Hears a speculative run from the inside (pass one as generate_mtp's `trace`). The methods are called
    between the round's phases, so they may read the state but must leave it as they found it. Each does nothing
    here. A watch that listens makes every round run phase by phase, keeping each row's state for `verified`."""
    listening = True

    def prefilled(self, ids, tok, first, seconds, state, head_cache, sampling):
        """After the prompt's pass: its token `tok` and the head's guess `first` (a qwen.tree.Guess) after it."""

    def round_began(self, state, head_cache):
        """Before a round drafts."""

    def drafted(self, state, tree, tokens, guesses):
        """Before the verify pass: `state` as the round found it; tokens (1, rows): the round's first token
        and every draft; tree: their shape; guesses: [None, Guess for node 1, ...]."""

    def verified(self, state, head_cache, logits, picks, path):
        """After the verify pass, before the rollback: logits (rows, V); every DeltaNet layer's memory is still
        the one the round found (the pass kept each row's write: its `memories(tree.parents)` gives the memory
        after each row, conv_steps the conv windows; qwen.cache.written_through the state as if written);
        picks: the main model's token after each row (None under the textbook rule); path: the accepted rows."""

    def rolled_back(self, state, head_cache):
        """After the rollback: the main model's state the next round starts from."""

    def round_ended(self, number, r, emitted, rollback, state, head_cache, sampling):
        """After round `number`, the head caught up: r, a qwen.mtp.Round; emitted: [(token, origin)]."""


class Nobody(Watch):
    """The watch when nobody listens: it hears nothing, so a round may run as one call and keep no step states."""
    listening = False


NOBODY = Nobody()


def _to_each(hook):
    """A Watches hook that passes its arguments to that hook of every watch, in order."""
    def passed_on(self, *args):
        for w in self.watches:
            getattr(w, hook)(*args)
    return passed_on


class Watches(Watch):
    """Several watches hearing one run: each hook is passed on to every one, in order."""

    def __init__(self, *watches):
        self.watches = watches

    prefilled, round_began, drafted, verified, rolled_back, round_ended = (
        _to_each(hook) for hook in ("prefilled", "round_began", "drafted", "verified", "rolled_back", "round_ended"))


class Trace(Watch, list):
    """The round records of one run, in order, and what to record: the DeltaNet layer (index among
    DeltaNet layers) and value head whose memory is watched, and at most how many rounds to keep
    (a very long run keeps its first ones).

        trace = Trace(watch_layer=0, watch_head=0)
        generate_mtp(model, head, ids, 64, k=2, trace=trace)      # trace[0] is the prefill"""

    def __init__(self, watch_layer=0, watch_head=0, max_rounds=None):
        super().__init__()
        self.watch_layer, self.watch_head, self.max_rounds = watch_layer, watch_head, max_rounds

    def add(self, record):
        if self.max_rounds is None or len(self) <= self.max_rounds:
            self.append(record)

    def view(self, state, head_cache, phase):
        """The live state, as a record shows it (state_view), watching this trace's layer and head. phase: when it
        is taken, one of PHASES ("prefill": after the prompt's pass; a round's "before", "after_verify", "after");
        a subclass may keep more per phase."""
        return state_view(state, head_cache, (self.watch_layer, self.watch_head))

    def prefilled(self, ids, tok, first, seconds, state, head_cache, sampling):
        self.add(prefill_record(ids, tok, first, seconds, self.view(state, head_cache, "prefill"), sampling))

    def round_began(self, state, head_cache):
        self.views = {"before": self.view(state, head_cache, "before")}

    def drafted(self, state, tree, tokens, guesses):
        self.tree = tree

    def verified(self, state, head_cache, logits, picks, path):
        # the memory every row wrote, up to the last row: what a pass that writes as it goes leaves
        self.views["after_verify"] = self.view(written_through(state, self.tree.ancestors(self.tree.size - 1)),
                                               head_cache, "after_verify")

    def round_ended(self, number, r, emitted, rollback, state, head_cache, sampling):
        self.views["after"] = self.view(state, head_cache, "after")
        self.add(round_record(number, r, emitted, rollback, self.views, sampling))


def pooled(x):
    """Average the last two dimensions of x (..., R, C) down to at most GRID x GRID -> (..., <=GRID, <=GRID)."""
    lead = x.shape[:-2]
    x = x.float().reshape(-1, 1, *x.shape[-2:])
    x = F.adaptive_avg_pool2d(x, (min(GRID, x.shape[-2]), min(GRID, x.shape[-1])))
    return x.reshape(*lead, *x.shape[-2:])


def as_grid(x):
    """A 2-D tensor as a list of rows of rounded floats (JSON-ready)."""
    return [[round(float(v), 5) for v in row] for row in x]


def grid(x):
    """A 2-D tensor (R, C) averaged down to at most GRID x GRID, as lists (what a record holds)."""
    return as_grid(pooled(x))


def state_view(state, head_cache, watch=(0, 0)):
    """A compact summary of the live state (see the module docstring)."""
    layers, kv = [], []
    deltanet = [s for s in state.layers if not isinstance(s, AttentionState)]
    for i, s in enumerate(state.layers):
        attn = isinstance(s, AttentionState)
        layers.append({"index": i, "kind": "attention" if attn else "deltanet", "bytes": s.nbytes()})
        if attn:
            kv.append(s.length())
    view = {"pos": state.pos, "kv": kv, "head_kv": head_cache.length(), "layers": layers}
    if deltanet:
        s = deltanet[min(watch[0], len(deltanet) - 1)]
        head = min(watch[1], s.S.shape[1] - 1)
        view["memory"] = grid(s.S[0, head])                             # (key_dim, value_dim) averaged
        view["conv"] = grid(s.conv[0])                                  # (conv_dim, K-1) averaged
        view["watch"] = {"layer": state.layers.index(s), "head": head}
    return view


def _top(probs, cols=None):
    values, idx = probs.topk(min(TOP, probs.shape[-1]))
    if cols is not None:
        idx = cols[idx]
    return [[int(i), round(float(v), 5)] for i, v in zip(idx, values)]


def coupled(sampling):
    """Whether these engine sampling arguments sample with shared noise (a seed and a temperature)."""
    return bool(sampling) and bool(sampling.get("temperature")) and sampling.get("seed") is not None


def _noise(logits, position, sampling, cols=None, top=4):
    """The shared-noise view of one position: the `top` tokens with the largest log-probability + noise,
    as [[id, log prob, noise], ...], the first being the token the rule picks (qwen.sample.coupled_pick)."""
    scores = filtered_logits(logits[None], sampling["temperature"], sampling.get("top_k"), sampling.get("top_p"))[0]
    log_p = scores.log_softmax(-1)
    noise = gumbel_noise(sampling["seed"], [position], logits.shape[-1] if cols is None else cols, logits.device)[0]
    order = (log_p + noise).topk(min(top, logits.shape[-1])).indices
    ids = order if cols is None else cols[order]
    return [[int(i), round(float(log_p[j]), 3), round(float(noise[j]), 3)] for i, j in zip(ids, order)
            if torch.isfinite(log_p[j])]


def _draft_entry(guess, sampling=None, position=None):
    logits, cols = guess.scores
    probs = logits.float().softmax(-1)
    if cols is None:
        prob = float(probs[guess.token])
    else:                                                      # FR-Spec: find the token's column
        where = (cols == guess.token).nonzero()
        prob = float(probs[int(where[0, 0])]) if len(where) else 0.0
    entry = {"token": int(guess.token), "prob": round(prob, 5), "top": _top(probs, cols)}
    if coupled(sampling):
        entry["noise"] = _noise(logits.float(), position, sampling, cols)
    return entry


def prefill_record(ids, tok, first, seconds, after, sampling=None):
    """Round 0: the prompt's pass, its token, and the head's first guess. after: state_view() after it."""
    return {"round": 0, "kind": "prefill", "pos": 0, "prompt_tokens": ids.shape[1],
            "emitted": [{"token": int(tok), "origin": "main"}],
            "next_draft": _draft_entry(first, sampling, ids.shape[1] + 1),
            "seconds": {"prefill": seconds["prefill"], "draft": seconds["draft"]},
            "states": {"after": after}}


def round_record(n_round, r, emitted, rollback, views, sampling=None):
    """A qwen.mtp.Round (a chain's or a tree's) as plain data. emitted: [(token, origin)] as yielded;
    views: state_view()s named before / after_verify / after; sampling: the engine's sampling arguments."""
    tree, on_path = r.tree, set(r.path)
    probs = r.p if r.p is not None else r.logits.float().softmax(-1)                   # (rows, V)
    verify = []
    for i in range(tree.size):
        position = r.pos + 1 + tree.depths[i]
        noise = _noise(r.logits[i].float(), position, sampling) if coupled(sampling) else None
        choice = noise[0][0] if noise else int(probs[i].argmax())      # shared noise: the rule's pick
        entry = {"token": choice, "prob": round(float(probs[i, choice]), 5), "top": _top(probs[i])}
        if noise:
            entry["noise"] = noise
        children = tree.children[i]
        if children:                           # the child on the accepted path, else the first
            child = next((c for c in children if c in on_path), children[0])
            entry["draft_prob"] = round(float(probs[i, r.rows[child]]), 5)
            entry["match"] = child in on_path
        verify.append(entry)
    record = {"round": n_round, "kind": "round", "pos": r.pos, "k": tree.depth,
              "draft": [_draft_entry(g, sampling, r.pos + tree.depths[j]) for j, g in enumerate(r.guesses) if j],
              "verify": verify, "accepted": r.accepted,
              "emitted": [{"token": int(t), "origin": o} for t, o in emitted],
              "rollback": rollback, "rolled_back": not r.bonus,
              "seconds": {key: round(v, 6) for key, v in r.seconds.items()}, "snapshot_bytes": int(r.snapshot_bytes),
              "states": {"before": views.get("before"), "after_verify": views.get("after_verify"),
                         "after": views.get("after")}}
    if not tree.is_chain():
        record.update(parents=list(tree.parents), path=list(r.path), ranks=[None] + [g.rank for g in r.guesses[1:]])
    if r.decision is not None:                 # k="auto": how the round chose its length
        record["decision"] = r.decision
    return record
