"""Multi-Token Prediction: the checkpoint's one-layer draft head, and speculative decoding with it.

The head reads the main model's last-layer output h_t (after the final norm) and the embedding of the
token t+1 that the main model just chose, and guesses token t+2:

    h' = norm(layer(fc(concat(pre_fc_norm_embedding(embed(x_{t+1})), pre_fc_norm_hidden(h_t)))))
    guess = argmax(lm_head(h'))              (lm_head and embed are shared with the main model)

One round of speculative decoding, with k draft tokens:
    1. guess   — the head proposes d1 (and, fed its own output, d2..dk);
    2. verify  — the main model runs [tok, d1..dk] in one pass: k+1 positions, k+1 predictions;
    3. accept  — the longest prefix of drafts the main model agrees with, plus the main model's own
                 next token (a correction where it disagreed, a bonus where it agreed with all);
       or roll back — the state has seen rejected drafts. KV caches are truncated by position; the
                 DeltaNet memories and conv windows cannot be, so they are restored (`recompute`:
                 snapshot before, restore and re-run the accepted tokens after) or selected
                 (`select`: the verify pass kept the state after each token; take the right one).
Greedy output is token-identical to plain decoding. Sampling with a seed is coupled (qwen.sample): the
head and the main model pick with the same Gumbel noise per position, a draft is kept while it equals
the main model's pick, and the output is token-identical to plain sampling with that seed (Daliri,
Musco and Suresh, arXiv 2408.07978). Sampling with a generator instead uses the textbook rule (accept
with probability min(1, p/q), else resample from max(p - q, 0)), which keeps the distribution.
"""
import json
import os
import time
from dataclasses import dataclass

import torch
import torch.nn as nn

from qwen.cache import (AttentionState, State, keep_step_states, restore_state, select_step_states,
                        snapshot_bytes, snapshot_state, take_step_states, truncate_kv)
from qwen.layer import DecoderLayer
from qwen.model import load_into
from qwen.norm import RMSNorm
from qwen.rope import rope_tables
from qwen.sample import check_prompt, coupled_pick, generate_stream, gumbel_noise, pick_token, probs_from_logits
from qwen.adaptive import DraftLengths, fixed_length
from qwen.costs import length_seconds, timed_lane
from qwen.trace import NOBODY, Watch
from qwen.tree import Guess, Tree, draft, guess, parse_tree, walk
from qwen.vocabs import shipped_draft_vocab
from qwen.weights import find_model, load_weights

ROLLBACKS = ("select", "recompute", "none")   # "none" skips the restore: deliberately wrong, for the demo


class MTP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H = cfg.hidden_size
        self.cfg = cfg
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.pre_fc_norm_embedding = RMSNorm(H, cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = RMSNorm(H, cfg.rms_norm_eps)
        self.layers = nn.ModuleList([DecoderLayer(cfg, "full_attention")])
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.draft_vocab = None        # optional (V',) token ids the draft scores (FR-Spec); None = all
        self.draft_proj = None         # with them, h -> their logits (B, V'): the output layer's rows, not trained
        self.draft_source = None       # where draft_vocab came from (draft_vocab_for), None where set by hand or unset

    @classmethod
    def from_pretrained(cls, cfg, path=None, dtype=torch.float32, device=None, lm_head=None):
        """Load the checkpoint's mtp.* tensors, eager (qwen.compiled makes a compiled view from outside).
        lm_head: the main model's output layer; given it, a draft_vocab.json beside the weights makes the
        draft score only the tokens it lists (FR-Spec, set_draft_vocab), and without one a vocabulary shipped
        for the checkpoint's tokenizer does (qwen.vocabs: the hub's Qwen3.5 checkpoints)."""
        path = path or find_model()
        weights = load_weights(path, part="mtp.", dtype=dtype)
        if not weights:
            raise ValueError(f"{path}: the checkpoint has no mtp.* tensors (no draft head)")
        with torch.device("meta"):
            head = cls(cfg)
        load_into(head, weights, f"{path} (mtp.*)")
        head = head.to(device=device).eval().requires_grad_(False)
        if lm_head is not None:
            ids, source = draft_vocab_for(path, cfg.vocab_size)
            head.set_draft_vocab(ids, lm_head)
            head.draft_source = source
        return head

    def forward(self, emb_next, hidden, start, cache):
        """emb_next: embeddings of tokens t+1, hidden: main-model outputs at t, both (B, T, H), at
        positions start..start+T-1 -> the head's output (B, T, H), to be fed to lm_head. Writes those
        positions of `cache` (an AttentionState), whose length becomes start + T."""
        return self.scored_pass(emb_next, hidden, start, cache)[0]

    def scored_pass(self, emb_next, hidden, start, cache):
        """forward, and the draft's scores where the pass computed them -> (output (B, T, H), logits
        (B, T, V') or None: score eagerly what is needed)."""
        B, T, _ = emb_next.shape
        cache.reserve(self.cfg, B, start + T, emb_next.dtype, emb_next.device)
        positions = torch.arange(start, start + T, device=emb_next.device)
        result = self.head_pass(emb_next, hidden, positions, cache)
        cache.n = start + T
        return result

    def head_pass(self, emb_next, hidden, positions, cache):
        """run() -> (output (B, T, H), None). The method a compiled view of the head (qwen.compiled)
        overrides: there a graph prepared for this T serves it, and may score the draft after every row
        in the same graph (then the scores take None's place)."""
        return self.run(emb_next, hidden, positions, cache), None

    def run(self, emb_next, hidden, positions, cache):
        """forward's tensor work at positions (T,): reads no Python number, so it compiles once per T."""
        cos, sin = rope_tables(self.cfg, positions)
        return self.norm(self.layers[0](self.combine(emb_next, hidden), cos, sin, cache, positions))

    def combine(self, emb_next, hidden):
        """The layer's input: both (B, T, H), each normalised, concatenated and projected -> (B, T, H)"""
        return self.fc(torch.cat([self.pre_fc_norm_embedding(emb_next), self.pre_fc_norm_hidden(hidden)], -1))

    def draft(self, model, hidden, tokens, start, cache, row=-1):
        """Run the head on (hidden (1, T, H), next tokens (1, T)) at positions start.. and score the
        guess after position start + row. -> (logits (1, V'), their token ids or None, head output (1, 1, H))"""
        out, logits = self.scored_pass(model.embed_tokens(tokens), hidden, start, cache)
        out = out[:, row]                                                              # (1, H)
        logits, cols = (logits[:, row], self.draft_vocab) if logits is not None else \
            self.draft_logits(out, model.lm_head)
        return logits, cols, out[:, None]

    def select_round(self, model, state, head_cache, tok_d1, out1, positions, noise=None):
        """One `select` round as greedy_round does it (same arguments, same result). The method a
        compiled view of the head (qwen.compiled) overrides, to run a greedy round as one graph."""
        return greedy_round(model, self, state, head_cache, tok_d1, out1, positions, noise)

    def fuses(self, model, k, sampled=False):
        """Does a `select` round of k drafts run as select_round (one call) rather than step by step?
        Eagerly, always; a compiled view answers by which of its graphs are ready."""
        return True

    def set_draft_vocab(self, token_ids, lm_head):
        """Score drafts only over `token_ids` (a frequency-ranked subset, FR-Spec). Verification stays
        full-vocabulary, so the output is unchanged; only the draft gets cheaper. None undoes it."""
        if token_ids is None:
            self.draft_vocab, self.draft_proj = None, None
            return
        self.draft_vocab = torch.as_tensor(token_ids, dtype=torch.long, device=lm_head.weight.device)
        self.draft_proj = fixed_linear(lm_head.weight[self.draft_vocab])

    def draft_logits(self, h, lm_head):
        """h: (B, H) -> (logits over the draft vocabulary (B, V'), ids of those columns or None)."""
        if self.draft_vocab is None:
            return lm_head(h), None
        return self.draft_proj(h), self.draft_vocab


def fixed_linear(w):
    """An nn.Linear computing x @ w.T (w: (out, in)) whose weight is a buffer: neither trained nor saved.
    subtle: w is stored as the contiguous transpose it is multiplied by (strides (1, out)), so the BLAS
    streams it once (MKL's "NN" GEMM); row-major ("NT") a few rows cost several times one at AVX2."""
    with torch.device("meta"):
        linear = nn.Linear(w.shape[1], w.shape[0], bias=False)
    del linear.weight
    linear.register_buffer("weight", w.detach().T.contiguous().T, persistent=False)
    return linear


DRAFT_VOCAB_FILE = "draft_vocab.json"     # {"token_ids": [...], ...} beside a checkpoint's weights (optional)


def load_draft_vocab(path, vocab_size):
    """The token ids listed in `path`/draft_vocab.json (qwen/train/draft_vocab.py writes one), or None
    where the checkpoint has none (the hub's Qwen3.5 checkpoints: the draft scores every token)."""
    file = os.path.join(path, DRAFT_VOCAB_FILE)
    if not os.path.exists(file):
        return None
    try:
        with open(file) as f:
            ids = json.load(f)["token_ids"]
        ok = isinstance(ids, list) and ids and all(isinstance(i, int) and 0 <= i < vocab_size for i in ids)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{file}: not a draft vocabulary ({type(e).__name__}: {e})") from e
    if not ok:
        raise ValueError(f"{file}: token_ids must be a non-empty list of token ids below {vocab_size}")
    return sorted(set(ids))


def draft_vocab_for(path, vocab_size):
    """The draft vocabulary a checkpoint folder gets: its own draft_vocab.json, else the one shipped for its
    tokenizer (qwen.vocabs), else none (every token scored). -> (sorted ids or None, where they came from or None)"""
    ids = load_draft_vocab(path, vocab_size)
    if ids is not None:
        return ids, DRAFT_VOCAB_FILE
    ids, record = shipped_draft_vocab(path, vocab_size)
    return (ids, f"shipped for {record['tokenizer']}") if ids is not None else (None, None)


def frequency_ranked_vocab(token_lists, vocab_size, size, always=()):
    """The `size` most frequent token ids in some tokenised text (ties by id), plus `always` (e.g. stop
    tokens): the draft vocabulary of FR-Spec. [[5, 5, 7], [5, 9]], size 2 -> [5, 7]"""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids in token_lists:
        counts += torch.bincount(torch.as_tensor(ids, dtype=torch.long), minlength=vocab_size)[:vocab_size]
    ranked = torch.argsort(-counts, stable=True)[:size].tolist()         # stable: ties keep id order
    return sorted(set(ranked) | set(always))


def accept_drafts(main_logits, drafts, draft_probs, temperature=0, top_k=None, top_p=None, generator=None,
                  seed=None, start=None):
    """Decide how many of a chain's drafts to keep and the main model's own next token.

    main_logits: (k+1, V), the verify pass's predictions after tok, d1, ..., dk, for the tokens at
    positions start..start+k; drafts: k ids; draft_probs: (k, V) the head's distributions the drafts
    were sampled from (used by the textbook rule only). Greedy or with a seed: `accept` on Tree.chain(k).
    -> (n accepted, next token, main probabilities (k+1, V) or None when greedy)"""
    k = len(drafts)
    sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    if not temperature or seed is not None:
        path, nxt, p, _ = accept(main_logits, Tree.chain(k), [None] + list(drafts), None, (start or 1) - 1, sampling)
        return len(path) - 1, nxt, p
    p = probs_from_logits(main_logits, temperature, top_k, top_p)          # (k+1, V)
    for i, d in enumerate(drafts):
        # q(d) <= p(d): always accept. q(d) > p(d): accept with probability p(d) / q(d).
        u = torch.rand((), generator=generator, device=p.device)
        if u * draft_probs[i, d] <= p[i, d]:
            continue
        # rejected: sample from what p has beyond q, normalised — this makes the output exactly p
        residual = (p[i] - draft_probs[i]).clamp(min=0)
        if residual.sum() <= 0:                                  # p == q numerically: p itself
            residual = p[i]
        return i, int(torch.multinomial(residual / residual.sum(), 1, generator=generator)), p
    return k, int(torch.multinomial(p[k], 1, generator=generator)), p    # all accepted: a bonus token


@dataclass
class Round:
    """What one round of speculative decoding did, for a chain (the tree Tree.chain(k)) or a draft tree."""
    pos: int                     # position of the round's first token (the last one emitted)
    tree: Tree                   # the rows' shape
    rows: list                   # each row's token: the round's first token, then one draft per node
    guesses: list                # [None, Guess for node 1, ...]: the head's guesses ([] for a round run as one call)
    logits: torch.Tensor         # (rows, V) the main model after each row (None for a round run as one call)
    p: torch.Tensor              # (rows, V) the main model's distributions when sampling, else None
    path: list                   # the accepted rows, [0, ...]
    next_token: int              # the main model's own token after them (correction or bonus)
    next_guess: Guess            # the head's guess for the next round's first draft
    seconds: dict                # draft, snapshot, verify, restore, rerun, catch_up (zeros unless timed)
    snapshot_bytes: int = 0
    lag: tuple = None            # a plain step of k="auto" (the head resting): (hidden (1, 1, H), next token
                                 # (1, 1)), the head's input it has not caught up on; next_guess is then None
    decision: dict = None        # k="auto": how the round chose its length (qwen.adaptive.decision)

    @property
    def accepted(self):
        """Drafts kept."""
        return len(self.path) - 1

    @property
    def drafts(self):
        """Every row's draft (a chain: its k guesses in order)."""
        return self.rows[1:]

    @property
    def kept(self):
        """The accepted drafts' tokens, in order."""
        return [self.rows[r] for r in self.path[1:]]

    @property
    def bonus(self):
        """The last accepted draft has no child: the next token extends the whole path (a bonus)."""
        return not self.tree.children[self.path[-1]]


class Clock:
    """Seconds per phase: clock.lap("verify") adds the time since the previous lap."""

    def __init__(self):
        self.seconds = dict(draft=0.0, verify=0.0, snapshot=0.0, restore=0.0, rerun=0.0, catch_up=0.0)
        self.t = time.perf_counter()

    def fresh(self):
        """A new clock for the next round."""
        return Clock()

    def lap(self, phase):
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self.t
        self.t = now


class NoClock(Clock):
    """The clock when nobody asked for timings: does nothing."""

    def fresh(self):
        return self

    def lap(self, phase):
        pass


def main_picks(logits, tree, P, sampling):
    """What the main model emits after each row (logits (rows, V)): its argmax, or with a seed the coupled
    sample at the row's position P + depth + 1. -> list of token ids"""
    if not sampling.get("temperature"):
        return logits.argmax(-1).tolist()
    return coupled_pick(logits, sampling["seed"], [P + d + 1 for d in tree.depths], sampling["temperature"],
                        sampling.get("top_k"), sampling.get("top_p")).tolist()


def accept(logits, tree, rows, guesses, P, sampling):
    """What the verify pass keeps. Greedy, or sampling with a seed: the main model's pick after each row
    (main_picks), walked from the root along the children it agrees with. Sampling with a generator (a chain
    only): the textbook rule, accept_drafts. logits: (rows, V)
    -> (accepted path [0, ...], the main model's next token, its distributions or None, picks or None)"""
    temperature, seed = sampling.get("temperature"), sampling.get("seed")
    if temperature and seed is None:
        q = torch.stack([g.q for g in guesses[1:]]) if tree.size > 1 else None
        n, nxt, p = accept_drafts(logits, rows[1:], q, **sampling, start=P + 1)
        return list(range(n + 1)), nxt, p, None
    picks = main_picks(logits, tree, P, sampling)
    path, nxt = walk(tree, rows, picks)
    return path, nxt, (probs_from_logits(logits, temperature, sampling.get("top_k"), sampling.get("top_p"))
                       if temperature else None), picks


def speculative_round(model, mtp, state, head_cache, tok, first, tree, rollback, sampling, clock, watch=NOBODY):
    """One round from `tok` (emitted, not yet run; at position state.pos) and the head's guess `first` for
    the token after it, drafting `tree` (a chain of k: Tree.chain(k)), in four phases: propose, verify, accept,
    commit (the rollback, then the head's catch-up). `watch` (a qwen.trace.Watch) hears the state between them.
    Tree.chain(0) (k="auto" choosing none) is a plain step: the head sits it out (`first` may be None) and
    does not catch up after it; the Round's `lag` holds what it missed. -> Round"""
    P = state.pos
    guesses = draft(mtp, model, tree, first, P, head_cache, sampling)                 # 1. propose
    rows = [tok] + [g.token for g in guesses[1:]]
    clock.lap("draft")
    seq = torch.tensor([rows], device=head_cache.k.device)                           # (1, rows)
    snap = prepare_rollback(state, tree, rollback, watch.listening, clock)
    watch.drafted(state, tree, seq, guesses)
    logits, hidden = verify(model, state, seq, tree, clock)                           # 2. verify
    path, nxt, p, picks = accept(logits[0], tree, rows, guesses, P, sampling)         # 3. accept
    watch.verified(state, head_cache, logits[0], picks, path)
    roll_back(model, state, seq, tree, path, P, rollback, snap, watch.listening, clock)   # 4. commit
    watch.rolled_back(state, head_cache)
    if tree.size == 1:                        # a plain step: the head rests, catching up later (lag)
        return Round(P, tree, rows, guesses, logits[0], p, path, nxt, None, clock.seconds, lag=(hidden, nxt))
    next_guess = head_catch_up(mtp, model, hidden, rows, tree, path, nxt, P, head_cache, sampling, clock)
    return Round(P, tree, rows, guesses, logits[0], p, path, nxt, next_guess, clock.seconds,
                 snapshot_bytes(snap) if snap else 0)


def prepare_rollback(state, tree, rollback, listening, clock):
    """Before the verify pass, what a rollback will need: `recompute`'s snapshot (returned; None otherwise), or
    `select`'s slots for the state after every row (kept for a listening watch too)."""
    snap = snapshot_state(state) if rollback == "recompute" and tree.size > 1 else None
    if (rollback == "select" and tree.size > 1) or listening:
        keep_step_states(state, tree.size)
    clock.lap("snapshot")
    return snap


def verify(model, state, seq, tree, clock):
    """Every row in one pass, each seeing its ancestors, at the state's next positions: seq (1, rows)
    -> (logits (1, rows, V), hidden (1, rows, H)); the state then holds them (verify_pass), its DeltaNet
    memories left as they were where the pass kept step states (until roll_back writes the kept rows')."""
    positions = state.begin_pass(seq)
    logits, hidden = verify_pass(model, state, seq, positions, tree)
    state.end_pass(seq.shape[1])
    clock.lap("verify")
    return logits, hidden


def verify_pass(model, state, seq, positions, tree=None):
    """The verify phase's model pass, in tensors: the rows seq (1, rows) at positions (rows,), each seeing its
    ancestors in `tree` (None or a chain: the causal pass) -> (logits (1, rows, V), hidden (1, rows, H)). Every
    round verifies through it, step by step (verify) and as one call (greedy_round); a compiled model's view
    serves it from a graph (step_pass). Moves no Python bookkeeping (state.pos, KV lengths)."""
    return model.step_pass(seq, positions, state, tree=None if tree is None or tree.is_chain() else tree)


def roll_back(model, state, seq, tree, path, P, rollback, snap, kept, clock):
    """The main state back to just after the accepted path's tokens: `select` writes the memory writes kept for
    the path's rows (kept: step states were kept though the rollback needs none), `recompute` restores the
    snapshot and runs the path again, "none" only cuts the KV caches (the recurrent memory left dirty, for the
    demo)."""
    n = len(path) - 1
    in_place = path == list(range(tree.size))                 # a chain, all accepted: nothing to undo
    if rollback == "select" and (tree.size > 1 or kept):
        select_step_states(state, P, path)
        clock.lap("restore")
        return
    if kept:                                    # kept for a watch: first write every row, as the pass would have
        take_step_states(state, tree.ancestors(tree.size - 1))
        keep_step_states(state, on=False)
    if rollback == "recompute" and not in_place:
        restore_state(state, snap)
        clock.lap("restore")
        model.forward_hidden(seq[:, :n + 1] if path == list(range(n + 1)) else seq[:, path], state)
        clock.lap("rerun")
    elif not in_place:
        truncate_kv(state, P + n + 1)
        state.pos = P + n + 1
    clock.lap("restore")


def head_catch_up(mtp, model, hidden, rows, tree, path, nxt, P, head_cache, sampling, clock):
    """The head catches up on P..P+n (the path's tokens, then nxt) and guesses the next round's first draft. It
    always runs depth + 1 rows (one compiled shape for a chain): the path, then first children to a leaf; the rows
    past n are overwritten before anything reads them. -> Guess"""
    n = len(path) - 1
    below = path + tree.first_children(path[-1])
    below += [below[-1]] * (tree.depth + 1 - len(below))
    tokens = [rows[r] for r in path[1:]] + [nxt] + [rows[r] for r in below[n + 1:]]
    head_cache.truncate(P)
    next_guess = guess(mtp, model, hidden if below == list(range(tree.size)) else hidden[:, below],
                       torch.tensor([tokens[:tree.depth + 1]], device=hidden.device), P, head_cache, sampling, row=n)
    head_cache.truncate(P + n + 1)
    clock.lap("catch_up")
    return next_guess


def picks(logits, noise, positions, cols=None):
    """The choice of each row of logits (R, V) -> column indices (R,): argmax, or with noise = (seed,
    temperature), the coupled sample at these positions (R,). seed and temperature as numbers: through
    qwen.sample.coupled_pick (it reads the positions as numbers, so the round runs eagerly); as 0-d
    tensors (a compiled round): the same Gumbel-max rule in tensors, noise for every column."""
    if noise is None:
        return logits.argmax(-1)
    seed, temperature = noise
    if not isinstance(seed, torch.Tensor):
        return coupled_pick(logits, seed, positions, temperature, cols=cols)
    noise = gumbel_noise(seed, positions, logits.shape[-1] if cols is None else cols)          # (R, V)
    return (logits.float() / temperature + noise).argmax(-1)


def greedy_guess(mtp, out, lm_head, noise=None, position=None):
    """The head's guess from its output out (B, H) -> token ids (B,), as tensors: greedy, or with shared
    noise for the token at `position` (a (1,) tensor; picks)."""
    logits, cols = mtp.draft_logits(out, lm_head)                                  # (B, V')
    best = picks(logits, noise, position, cols)
    return best if cols is None else cols[best]


def greedy_round(model, mtp, state, head_cache, tok_d1, out1, positions, noise=None):
    """speculative_round's four phases for a chain, greedy (or sampled with shared noise), rolled back by
    `select`, each in its tensor form: no Python number is read until it returns, so it compiles into one graph
    per k (qwen.compiled) and a round costs one call instead of a head pass per draft, a verify pass and the Python
    between them. The verify pass and the commit are the step-by-step round's own (verify_pass, take_step_states).

    tok_d1: (1, 2) the round's first token and the head's guess d1; out1: (1, 1, H) the head output
    that guessed d1; positions: (k+1,) P..P+k; noise: None (greedy), or (seed, temperature) (picks).
    The state keeps step states (keep_step_states).
    -> drafts (1, k), n accepted (1,), the main model's next token (1,), the next round's d1 (1,)
    and the head output behind it (1, 1, H). The state is selected after token n+1 in place; its
    Python bookkeeping (pos, KV lengths) is the caller's (fused_round)."""
    drafts = draft_chain(mtp, model, tok_d1[:, 1:], out1, positions, head_cache, noise)       # 1. propose (1, k)
    logits, hidden = verify_pass(model, state, torch.cat([tok_d1[:, :1], drafts], dim=1), positions)   # 2. verify
    n, nxt = accept_chain(picks(logits[0], noise, positions + 1), drafts[0])                  # 3. accept
    take_step_states(state, n, of=positions.shape[0])                           # 4. commit: rows 0..n written,
    out = mtp.run(model.embed_tokens(catch_up_tokens(drafts[0], n, nxt)), hidden, positions,   # the head's catch-up
                  head_cache)[0].index_select(0, n)[None]                                    # (1, 1, H)
    return drafts, n, nxt, greedy_guess(mtp, out[:, 0], model.lm_head, noise, positions[:1] + n + 2), out


def draft_chain(mtp, model, d1, out1, positions, head_cache, noise=None):
    """propose for a chain, in tensors: d1 (1, 1) and the head output that guessed it (1, 1, H), then d2..dk, the
    head fed its own output at P..P+k-2 (positions (k+1,): P..P+k) -> drafts (1, k)"""
    drafts, out = [d1], out1
    for j in range(1, positions.shape[0] - 1):
        out = mtp.run(model.embed_tokens(drafts[-1]), out, positions[j - 1:j], head_cache)   # (1, 1, H)
        guess = greedy_guess(mtp, out[:, 0], model.lm_head, noise, positions[j + 1:j + 2])   # d_{j+1} at P+j+1
        drafts.append(guess[:, None])                                                        # (1, 1)
    return torch.cat(drafts, dim=1)


def accept_chain(choice, drafts):
    """accept for a chain, in tensors (walk on Tree.chain(k)): the main model's pick after each row, choice (k+1,),
    against the drafts (k,) -> (n (1,): the longest prefix of drafts it agrees with, its next token (1,)).
    subtle: indices stay tensors (index_select, not choice[n]): reading n as a number would end the graph."""
    n = (choice[:-1] == drafts).long().cumprod(0).sum(0, keepdim=True)        # (1,)
    return n, choice.index_select(0, n)


def catch_up_tokens(drafts, n, nxt):
    """The tokens the head catches up on after a chain round, in tensors: d1..dn, then nxt, at P..P+n, and rows
    up to k+1 (one compiled shape) that are overwritten before anything reads them. drafts (k,), n, nxt (1,)
    -> (1, k+1)"""
    fill = torch.cat([drafts, drafts[-1:]])                                                    # (k+1,)
    return torch.where(torch.arange(fill.shape[0], device=fill.device) < n, fill, nxt)[None]


def rounds_in_one_call(model, mtp, k, rollback="select", sampling=None, traced=False):
    """Does generate_mtp_stream run its next round as one greedy_round call? `select` rounds of a real
    head without a trace, greedy or sampled with shared noise and no top-k or top-p, where the head's
    fuses() allows (the scripted head, rejection sampling, filters, `recompute` and the trace need the
    step-by-step round)."""
    sampling = sampling or {}
    sampled = bool(sampling.get("temperature"))
    plain = not sampled or (sampling.get("seed") is not None and sampling.get("top_k") is None
                            and sampling.get("top_p") is None)
    return rollback == "select" and plain and not traced and isinstance(mtp, MTP) and mtp.fuses(model, k, sampled)


def fused_round(model, mtp, state, head_cache, tok, first, k, sampling=None, clock=NoClock()):
    """One `select` round through the head's select_round (greedy_round), then its Python bookkeeping.
    -> Round (without per-draft records or logits); its seconds: the whole round as one phase, "fused"."""
    P, device = state.pos, head_cache.k.device
    keep_step_states(state, k + 1)
    positions = state.begin_pass(torch.empty(1, k + 1, device=device))        # only the shape counts
    args = (torch.tensor([[tok, first.token]], device=device), first.out, positions)
    noise = (sampling["seed"], sampling["temperature"]) if sampling and sampling.get("temperature") else None
    drafts, n, nxt, guess_next, out = mtp.select_round(model, state, head_cache, *args, noise)
    n = int(n[0])
    state.end_pass(n + 1)                                      # pos and KV lengths: P + n + 1
    keep_step_states(state, on=False)
    head_cache.n = P + n + 1
    clock.lap("fused")
    return Round(P, Tree.chain(k), [tok] + drafts[0].tolist(), [], None, None, list(range(n + 1)), int(nxt[0]),
                 Guess(int(guess_next[0]), None, out, None), clock.seconds)


MAX_AUTO_K = 4       # k="auto" drafts at most this many a round (each length's round is timed, and compiled)


def plan_run(model, mtp, ids, k, tree, max_k, lengths, sampling, rollback="select", trace=None):
    """generate_mtp_stream's options, checked -> (the largest tree a round drafts, k="auto"'s chooser: `lengths`
    as given, else this model's and head's measured once (lengths_for); None for a fixed shape)."""
    tree, lengths = _round_shape(k, tree, max_k, lengths, sampling, rollback, trace)
    check_prompt(model, ids)
    return tree, lengths_for(model, mtp, tree.depth, bool(sampling["temperature"]), rollback) if lengths is True \
        else lengths


def _round_shape(k, tree, max_k, lengths, sampling, rollback, trace):
    """plan_run's checks, without the model: -> (tree, lengths, True to measure them, or None)."""
    if rollback not in ROLLBACKS:
        raise ValueError(f"rollback must be one of {ROLLBACKS}, not {rollback!r}")
    if trace is not None and not isinstance(trace, Watch):
        raise ValueError(f"trace is a qwen.trace.Watch (a Trace, say), not {type(trace).__name__}")
    if k == "auto":
        if tree is not None:
            raise ValueError("k='auto' chooses a chain's length each round; a draft tree keeps its shape")
        if lengths is None and not (isinstance(max_k, int) and 1 <= max_k <= MAX_AUTO_K):
            raise ValueError(f"max_k (the longest draft of k='auto') must be a whole number from 1 to {MAX_AUTO_K}, "
                             f"not {max_k!r}")
        return Tree.chain(lengths.max_k if lengths is not None else max_k), lengths or True
    if tree is not None:
        tree = parse_tree(tree)
        if not tree.is_chain() and sampling["temperature"] and sampling["seed"] is None:
            raise ValueError("a draft tree samples with a seed (shared noise, seed=...); without one only chains "
                             "sample (the textbook rule for several drafts per position is another algorithm)")
        return tree, None
    if isinstance(k, str) and not k.isdigit():
        raise ValueError(f"k is a number of draft tokens per round or 'auto', not {k!r}")
    if not 1 <= int(k) <= 8:
        raise ValueError(f"k (draft tokens per round) must be between 1 and 8, not {k}")
    return Tree.chain(int(k)), None


def run_round(model, mtp, state, head_cache, tok, first, tree, rollback, sampling, clock, watch=NOBODY):
    """One round on the fastest path that serves it: a chain's `select` round as one call (fused_round) where
    rounds_in_one_call allows, else phase by phase (speculative_round; Tree.chain(0): a plain step). -> Round"""
    if tree.depth and tree.is_chain() and rounds_in_one_call(model, mtp, tree.depth, rollback, sampling,
                                                             watch.listening):
        return fused_round(model, mtp, state, head_cache, tok, first, tree.depth, sampling, clock)
    if not tree.depth and not watch.listening:
        return plain_step(model, state, tok, sampling, clock)
    return speculative_round(model, mtp, state, head_cache, tok, first, tree, rollback, sampling, clock, watch)


def plain_step(model, state, tok, sampling, clock):
    """A round of no drafts, unwatched: one step of plain decoding, the head idle (speculative_round does the same
    with every phase to watch). -> Round; its `lag`, the head's input it missed: (hidden (1, 1, H), next token)"""
    P = state.pos
    logits, hidden = verify(model, state, torch.tensor([[tok]], device=model.embed_tokens.weight.device),
                            Tree.chain(0), clock)
    nxt = int(pick_token(logits[:, -1], **sampling, position=P + 1)[0])
    return Round(P, Tree.chain(0), [tok], [None], logits[0], None, [0], nxt, None, clock.seconds, lag=(hidden, nxt))


def emitted(r, out, max_new_tokens, stop):
    """A Round's tokens with their origins, cut exactly where plain decoding would end (a stop token, or
    max_new_tokens), appended to `out`. -> [(id, origin)]"""
    last = "main" if r.tree.size == 1 else "bonus" if r.bonus else "correction"
    emit = []
    for t, origin in [(d, "draft") for d in r.kept] + [(r.next_token, last)]:
        if len(out) >= max_new_tokens:
            break
        out.append(t)
        emit.append((t, origin))
        if t in stop:
            break
    return emit


@torch.inference_mode()     # as a decorator: entered on every resume, whichever thread resumes
def generate_mtp_stream(model, mtp, ids, max_new_tokens=100, stop=(), k=1, rollback="select", temperature=0,
                        top_k=None, top_p=None, generator=None, trace=None, seed=None, tree=None, timings=None,
                        max_k=3, lengths=None):
    """Speculative decoding with the MTP head (batch 1). Yields, after prefill and after each round,
    (new tokens with their origins [(id, "main"|"draft"|"correction"|"bonus")], rounds, hits).
    Sampling (temperature > 0) is coupled with a seed (the tokens of generate(..., seed=seed)), else the textbook
    rule with `generator` (chains only). `tree`: a draft tree's shape (qwen.tree.parse_tree) for the chain of k.
    `trace`: a qwen.trace.Watch that hears every round from the inside (a qwen.trace.Trace keeps records).
    `timings`: a list that receives, for the prefill and then each round, its seconds per phase (prefill; draft,
    snapshot, verify, restore, rerun, catch_up; "fused" for a round run as one call), changing nothing else.
    k="auto": before each round, choose its chain's length, 0 (a plain step) to `max_k`, as far as it pays on
    this host (qwen.adaptive) under `lengths` (a DraftLengths; None: this model's and head's, measured once:
    lengths_for); the round is then the fixed-k round of that length. Its `counts` say how many rounds drafted each."""
    sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, generator=generator, seed=seed)
    tree, lengths = plan_run(model, mtp, ids, k, tree, max_k, lengths, sampling, rollback, trace)
    watch = NOBODY if trace is None else trace
    clock = Clock() if watch.listening or timings is not None else NoClock()
    state, head_cache, tok, first = prefill(model, mtp, ids, ids.shape[1] + max_new_tokens + tree.size, sampling,
                                            clock)
    watch.prefilled(ids, tok, first, clock.seconds, state, head_cache, sampling)
    if timings is not None:
        timings.append(dict(clock.seconds))
    out, rounds, hits, lag = [tok], 0, 0, []
    yield [(tok, "main")], rounds, hits
    while len(out) < max_new_tokens and out[-1] not in stop:
        clock = clock.fresh()
        shape = tree if lengths is None else Tree.chain(lengths.choose())
        if shape.size > 1 and first is None:        # back from a rest: the head catches up on the steps it missed
            first, lag = catch_up_after_rest(mtp, model, lag, head_cache, sampling), []
        watch.round_began(state, head_cache)
        r = run_round(model, mtp, state, head_cache, tok, first, shape, rollback, sampling, clock, watch)
        if lengths is not None:
            lengths.saw(shape.depth, r.accepted)
            r.decision = lengths.decision
        if r.lag is not None:                       # a plain step: what the head missed waits for its catch-up
            lag.append(r.lag)
        emit, rounds = emitted(r, out, max_new_tokens, stop), rounds + 1
        hits += sum(origin == "draft" for _, origin in emit)     # accepted drafts past the budget don't count
        tok, first = r.next_token, r.next_guess
        watch.round_ended(rounds, r, emit, rollback, state, head_cache, sampling)
        if timings is not None:
            timings.append(dict(r.seconds))
        yield emit, rounds, hits


def catch_up_after_rest(mtp, model, lag, head_cache, sampling):
    """After plain steps with the head idle: one head pass over what it missed (lag: [(hidden (1, 1, H), the
    token after it)], in order) and its guess after the last. -> Guess"""
    hidden = torch.cat([h for h, _ in lag], dim=1)                                      # (1, L, H)
    tokens = torch.tensor([[t for _, t in lag]], device=hidden.device)                  # (1, L)
    return guess(mtp, model, hidden, tokens, head_cache.n, head_cache, sampling)


def prefill(model, mtp, ids, capacity, sampling, clock):
    """The main state and the head's cache for `capacity` positions (allocated once: nothing grows), the prompt's
    pass, its first token and the head's first guess (timed: prefill, draft) -> (State, AttentionState, token, Guess)"""
    state, head_cache = State(model, capacity), AttentionState()
    head_cache.reserve(model.cfg, 1, capacity, model.embed_tokens.weight.dtype, ids.device)
    hidden = model.hidden(ids, state)                                      # (1, T, H)
    logits = model.lm_head(hidden[:, -1])                                  # only the last position is needed
    clock.lap("prefill")
    tok = int(pick_token(logits, **sampling, position=ids.shape[1])[0])
    nxt = torch.cat([ids[:, 1:], torch.tensor([[tok]], device=ids.device)], dim=1)
    first = guess(mtp, model, hidden, nxt, 0, head_cache, sampling)
    clock.lap("draft")
    return state, head_cache, tok, first


def generate_mtp(model, mtp, ids, max_new_tokens=100, stop=(), k=1, rollback="select", **options):
    """Speculative decoding, collected. -> (tokens, rounds, hits); hits counts accepted draft tokens.
    options: generate_mtp_stream's (temperature, top_k, top_p, generator, seed, trace, tree, timings, max_k,
    lengths)."""
    tokens, rounds, hits = [], 0, 0
    for emit, rounds, hits in generate_mtp_stream(model, mtp, ids, max_new_tokens, stop, k, rollback, **options):
        tokens += [t for t, _ in emit]
    return tokens, rounds, hits


def lengths_for(model, mtp, max_k=3, sampled=False, rollback="select"):
    """This model's and head's DraftLengths on this host for k="auto": the seconds of a round of each length from
    the one cost table (qwen.costs.length_seconds: measured the first time, and again once other compiled graphs
    serve them; sampled: as shared-noise sampling pays)."""
    if not (isinstance(max_k, int) and 1 <= max_k <= MAX_AUTO_K):
        raise ValueError(f"max_k (the longest draft of k='auto') must be a whole number from 1 to {MAX_AUTO_K}, "
                         f"not {max_k!r}")
    sampling = dict(temperature=0.5, seed=0) if sampled else {}
    def race_for(ids, max_new_tokens, lanes):
        return engine_race(model, mtp, ids, max_new_tokens, lanes, sampling)
    return DraftLengths(length_seconds(model, mtp, max_k, race_for, sampling, rollback))


def engine_race(model, mtp, ids, max_new_tokens, lanes, sampling=None):
    """A race_once for the one timer (qwen.costs.measure): the engine's own streams run one after another, stop
    tokens ignored, timed from the caller's side (qwen.costs.timed_lane) and with the engine's timings on: plain
    decoding, then per entry of `lanes` [(k, rollback, tree)] speculative decoding (k = 0: plain steps in a
    k="auto" run, the head resting; a tree: its shape). -> a function () -> ([LaneTimes], [timings per lane])"""
    sampling = sampling or {}

    def spec_stream(k, rollback, tree, timings):
        shape = dict(k="auto", lengths=fixed_length(0, 1)) if k == 0 else dict(k=k, tree=tree or None)
        return generate_mtp_stream(model, mtp, ids, max_new_tokens, (), rollback=rollback, timings=timings,
                                   **shape, **sampling)

    def race_once():
        timings = [[] for _ in range(1 + len(lanes))]
        finished = [timed_lane(generate_stream(model, ids, max_new_tokens, timings=timings[0], **sampling),
                               lambda tok: ["main"])]
        for (k, rollback, tree), phases in zip(lanes, timings[1:]):
            finished.append(timed_lane(spec_stream(k, rollback, tree, phases),
                                       lambda item: [origin for _, origin in item[0]]))
        return finished, timings
    return race_once


def prompt_passes(model, mtp, ids, k, rollback="select", sampling=None, tree=None):
    """[plain, speculative] factories of fresh streams whose first item is the prompt's pass, for timing that pass
    in each lane (qwen.costs.prefill_seconds, CostTable.with_prompt_pass)."""
    sampling = sampling or {}
    return [lambda: generate_stream(model, ids, 2, **sampling),
            lambda: generate_mtp_stream(model, mtp, ids, 2, (), k, rollback, tree=tree, **sampling)]
