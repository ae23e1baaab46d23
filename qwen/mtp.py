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
Greedy output is token-identical to plain decoding; with sampling, the acceptance rule
(accept with probability min(1, p/q), else resample from max(p - q, 0)) keeps the distribution.
"""
import time

import torch
import torch.nn as nn

from qwen.cache import (AttentionState, State, keep_step_states, restore_state, select_step_states,
                        snapshot_bytes, snapshot_state, truncate_kv)
from qwen.layer import DecoderLayer
from qwen.model import load_into
from qwen.norm import RMSNorm
from qwen.rope import rope_tables
from qwen.sample import check_prompt, pick_token, probs_from_logits
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

    @classmethod
    def from_pretrained(cls, cfg, path=None, dtype=torch.float32, device=None):
        path = path or find_model()
        weights = load_weights(path, part="mtp.", dtype=dtype)
        if not weights:
            raise ValueError(f"{path}: the checkpoint has no mtp.* tensors (no draft head)")
        with torch.device("meta"):
            head = cls(cfg)
        load_into(head, weights, f"{path} (mtp.*)")
        return head.to(device=device).eval().requires_grad_(False)

    def forward(self, emb_next, hidden, start, cache):
        """emb_next: embeddings of tokens t+1, hidden: main-model outputs at t, both (B, T, H), at
        positions start..start+T-1 -> the head's output (B, T, H), to be fed to lm_head. Extends cache."""
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(emb_next), self.pre_fc_norm_hidden(hidden)], -1))
        cos, sin = rope_tables(self.cfg, torch.arange(start, start + x.shape[1], device=x.device))
        return self.norm(self.layers[0](x, cos, sin, cache))

    def set_draft_vocab(self, token_ids, lm_head):
        """Score drafts only over `token_ids` (a frequency-ranked subset, FR-Spec). Verification stays
        full-vocabulary, so the output is unchanged; only the draft gets cheaper. None undoes it."""
        if token_ids is None:
            self.draft_vocab, self.draft_weight = None, None
            return
        self.draft_vocab = torch.as_tensor(token_ids, dtype=torch.long, device=lm_head.weight.device)
        self.draft_weight = lm_head.weight[self.draft_vocab].contiguous()    # (V', H)

    def draft_logits(self, h, lm_head):
        """h: (B, H) -> (logits over the draft vocabulary (B, V'), ids of those columns or None)."""
        if self.draft_vocab is None:
            return lm_head(h), None
        return h @ self.draft_weight.T, self.draft_vocab


def frequency_ranked_vocab(token_lists, vocab_size, size, always=()):
    """The `size` most frequent token ids in some tokenised text (ties by id), plus `always` (e.g. stop
    tokens): the draft vocabulary of FR-Spec. [[5, 5, 7], [5, 9]], size 2 -> [5, 7]"""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids in token_lists:
        counts += torch.bincount(torch.as_tensor(ids, dtype=torch.long), minlength=vocab_size)[:vocab_size]
    ranked = torch.argsort(-counts, stable=True)[:size].tolist()         # stable: ties keep id order
    return sorted(set(ranked) | set(always))


def forward_hidden(model, ids, state):
    """model(ids, state), also returning the last-layer output the head reads. -> (logits, hidden)"""
    hidden = model.hidden(ids, state)
    return model.lm_head(hidden), hidden


def accept_drafts(main_logits, drafts, draft_probs, temperature=0, top_k=None, top_p=None, generator=None):
    """Decide how many drafts to keep and the main model's own next token.

    main_logits: (k+1, V), the verify pass's predictions after tok, d1, ..., dk; drafts: k ids;
    draft_probs: (k, V) the head's distributions the drafts were sampled from (unused when greedy).
    -> (n accepted, next token, main probabilities (k+1, V) or None)"""
    k = len(drafts)
    if not temperature:
        choice = main_logits.argmax(-1).tolist()               # what the main model would emit at each position
        n = 0
        while n < k and choice[n] == drafts[n]:
            n += 1
        return n, choice[n], None
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


def _draft(mtp, model, hidden, tokens, start, cache, temperature, top_k, top_p, generator):
    """Run the head on (hidden, next tokens) at positions start.. and guess one token from its last
    output. hidden: (1, T, H); tokens: (1, T) -> (guess id, its distribution (V,) or None, head output (1, 1, H), logits)"""
    out = mtp(model.embed_tokens(tokens), hidden, start, cache)
    logits, cols = mtp.draft_logits(out[:, -1], model.lm_head)              # (1, V')
    tok = int(pick_token(logits, temperature, top_k, top_p, generator)[0])
    full = None
    if temperature:                                                          # q over the whole vocabulary
        q = probs_from_logits(logits[0], temperature, top_k, top_p)
        full = q if cols is None else torch.zeros(model.cfg.vocab_size, device=q.device).index_add_(0, cols, q)
    if cols is not None:
        tok = int(cols[tok])
    return tok, full, out[:, -1:], (logits[0], cols)


@torch.inference_mode()     # as a decorator: entered on every resume, whichever thread resumes
def generate_mtp_stream(model, mtp, ids, max_new_tokens=100, stop=(), k=1, rollback="select", temperature=0,
                        top_k=None, top_p=None, generator=None, trace=None):
    """Speculative decoding with the MTP head (batch 1). Yields, after prefill and after each round,
    (new tokens with their origins [(id, "main"|"draft"|"correction"|"bonus")], rounds, hits).
    `trace`: a list (or callable) that receives one plain-data record per round (see qwen.trace)."""
    from qwen import trace as tr                                       # recording lives beside, not inside
    if rollback not in ROLLBACKS:
        raise ValueError(f"rollback must be one of {ROLLBACKS}, not {rollback!r}")
    if not 1 <= int(k) <= 8:
        raise ValueError(f"k (draft tokens per round) must be between 1 and 8, not {k}")
    check_prompt(model, ids)
    record = tr.recorder(trace)
    state, head_cache = State(model), AttentionState()
    t0 = time.perf_counter()
    hidden = model.hidden(ids, state)                                      # (1, T, H)
    logits = model.lm_head(hidden[:, -1])                                  # only the last position is needed
    t1 = time.perf_counter()
    tok = int(pick_token(logits, temperature, top_k, top_p, generator)[0])
    nxt = torch.cat([ids[:, 1:], torch.tensor([[tok]], device=ids.device)], dim=1)
    guess = _draft(mtp, model, hidden, nxt, 0, head_cache, temperature, top_k, top_p, generator)
    if record:
        record(tr.prefill_record(model, state, head_cache, ids, tok, guess, t1 - t0, time.perf_counter() - t1,
                                record.watch))
    out, rounds, hits = [tok], 0, 0
    yield [(tok, "main")], rounds, hits
    budget = max_new_tokens
    while len(out) < budget and out[-1] not in stop:
        P = state.pos                                       # tok sits at position P, not yet run
        before = tr.state_view(state, head_cache, record.watch) if record else None
        # 1. guess: d1 came from the last head pass; d2..dk feed the head its own output
        t0 = time.perf_counter()
        drafts, qs, views = [guess[0]], [guess[1]], [guess[3]]
        h_prev = guess[2]
        for j in range(1, k):
            # the head's entry at position P pairs (h_P, d1); h_P is unknown until verify, so its own output stands in
            g = _draft(mtp, model, h_prev, torch.tensor([[drafts[-1]]], device=ids.device), P + j - 1,
                       head_cache, temperature, top_k, top_p, generator)
            drafts.append(g[0]); qs.append(g[1]); views.append(g[3]); h_prev = g[2]
        t_draft = time.perf_counter() - t0
        # 2. verify all k+1 positions in one pass, keeping what a rollback will need
        t0 = time.perf_counter()
        snap, t_snap, snap_size = None, 0.0, 0
        if rollback == "recompute":
            snap = snapshot_state(state)
            snap_size = snapshot_bytes(snap)
        elif rollback == "select":
            keep_step_states(state)
        t_snap = time.perf_counter() - t0
        t0 = time.perf_counter()
        seq = torch.tensor([[tok] + drafts], device=ids.device)                   # (1, k+1)
        logits, hidden = forward_hidden(model, seq, state)
        t_verify = time.perf_counter() - t0
        after_verify = tr.state_view(state, head_cache, record.watch) if record else None
        n, nxt_tok, p = accept_drafts(logits[0], drafts, torch.stack(qs) if temperature else None,
                                      temperature, top_k, top_p, generator)
        rounds, hits = rounds + 1, hits + n
        # 3. accept, or roll back the main state to just after tok, d1..dn
        t0 = time.perf_counter()
        t_rerun = 0.0
        if rollback == "select":
            select_step_states(state, P, n + 1)
        elif n < k:
            if rollback == "recompute":
                restore_state(state, snap)
                t1 = time.perf_counter()
                _, hidden = forward_hidden(model, seq[:, :n + 1], state)         # re-run the accepted tokens
                t_rerun = time.perf_counter() - t1
            else:                                                                 # "none": KV only, memory left dirty
                truncate_kv(state, P + n + 1)
                state.pos = P + n + 1
        t_restore = time.perf_counter() - t0 - t_rerun
        emitted = [(d, "draft") for d in drafts[:n]] + [(nxt_tok, "bonus" if n == k else "correction")]
        # emit, ending exactly where plain decoding would (stop token or max_new_tokens)
        emit = []
        for t, origin in emitted:
            if len(out) >= budget:
                break
            out.append(t)
            emit.append((t, origin))
            if t in stop:
                break
        tok = nxt_tok
        head_cache.truncate(P)                  # drop the head's speculative entries
        if len(out) < budget and out[-1] not in stop:
            # the head learns the accepted positions P..P+n and guesses the next round's d1
            t0 = time.perf_counter()
            seq_next = torch.tensor([drafts[:n] + [nxt_tok]], device=ids.device)
            guess = _draft(mtp, model, hidden[:, :n + 1], seq_next, P, head_cache, temperature, top_k, top_p,
                           generator)
            t_draft += time.perf_counter() - t0
        if record:
            record(tr.round_record(model, rounds, P, drafts, qs if temperature else None, views, logits[0], p,
                                   n, emit, rollback, dict(draft=t_draft, verify=t_verify, snapshot=t_snap,
                                                           restore=t_restore, rerun=t_rerun),
                                   snap_size, before, after_verify, tr.state_view(state, head_cache, record.watch)))
        yield emit, rounds, hits


def generate_mtp(model, mtp, ids, max_new_tokens=100, stop=(), k=1, rollback="select", temperature=0,
                 top_k=None, top_p=None, generator=None, trace=None):
    """Speculative decoding, collected. -> (tokens, rounds, hits); hits counts accepted draft tokens."""
    tokens, rounds, hits = [], 0, 0
    for emit, rounds, hits in generate_mtp_stream(model, mtp, ids, max_new_tokens, stop, k, rollback,
                                                  temperature, top_k, top_p, generator, trace):
        tokens += [t for t, _ in emit]
    return tokens, rounds, hits
