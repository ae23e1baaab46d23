"""Recording a run for the step-through view with the real engine, and the skip-the-restore proof.

    run = record_run(model, mtp, chat, ids, Settings(prompt="Hi", k=2))     # a steps.Run, trace included
    proof = skip_restore_proof(model, mtp, chat, ids, settings)              # plain vs restored vs skipped

Both run speculative decoding (qwen.mtp.generate_mtp_stream) with a qwen.trace.Trace; the proof also
runs plain greedy decoding and, once more, rollback="none" (KV truncated, DeltaNet memory left dirty).
"""
import time
from dataclasses import dataclass, field, replace

import torch

from demo.race import calibrate
from demo.prompts import sampling
from demo.tokens import token_pieces
from demo.stepper.steps import MAX_ROUNDS, Run, deltanet_layers, draft_summary, nearest_deltanet
from demo.stepper.treerec import TreeNotes
from demo.choices import SKIP_RESTORE
from qwen.mtp import generate_mtp_stream, lengths_for
from qwen.sample import generate_stream
from qwen.tree import parse_tree
from qwen.cache import AttentionState
from qwen.costs import Pass, time_pass
from qwen.trace import GRID, Trace, as_grid, pooled

PROOF_TOKENS = 128          # the proof runs at least this long, so a dirty memory has time to show


# --- recording -----------------------------------------------------------------------------------------

def token_label(chat, token_id):
    """One token shown alone: its text, or its bytes in hex when it is part of a character (byte-level
    BPE splits most Chinese characters over two or three tokens)."""
    text = chat.decode([token_id])
    if text and "\ufffd" not in text:
        return text
    piece = chat.tk.id_to_token(token_id) or ""
    raw = _byte_level_bytes(piece)
    if raw is None:
        return piece or f"#{token_id}"
    return "<" + " ".join(f"{b:02x}" for b in raw) + ">"


# GPT-2's byte-level alphabet: a printable byte stands for itself, the n-th other byte for chr(256 + n)
_PRINTABLE = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
_BYTE_OF = {**{chr(b): b for b in _PRINTABLE},
            **{chr(256 + n): b for n, b in enumerate(b for b in range(256) if b not in _PRINTABLE)}}


def _byte_level_bytes(piece):
    """GPT-2 byte-level symbols -> bytes, or None when `piece` is not made of them."""
    try:
        return bytes(_BYTE_OF[c] for c in piece)
    except KeyError:
        return None


def record_ids(records):
    """Every token id named in the records (drafts, alternatives, verify choices, emitted)."""
    ids = set()
    for rec in records:
        entries = rec.get("draft", []) + ([rec["next_draft"]] if "next_draft" in rec else [])
        for e in entries + rec.get("verify", []):
            ids.add(e["token"])
            ids.update(t for t, _ in e.get("top", []))
        ids.update(e["token"] for e in rec["emitted"])
        ids.update(rec.get("tokens", []) + rec.get("picks", []) + rec.get("row_picks", []))   # a tree's rows
    return ids


GRIDS_BUDGET = 64 * 2**20      # bytes of every layer's and head's memory grids kept while recording (auto watch)


def _peaks(x):
    """(..., R, C) -> (...): the largest |value| of each grid."""
    return x.abs().flatten(-2).amax(-1)


def faintest_panel(states, verify, removed, kept, rolled_back, select):
    """How clearly each (DeltaNet layer, value head) tells a run's story in the memory figure: its faintest
    panel over the run, each panel's largest |value| as a share of the largest over the run (for the
    memories, and for the changes), the minimum over every round. A lower bound of what the figure shows,
    whose colour scales end at a quantile, not at the largest value.

    states: (rounds, 3, layers, heads) largest |S| before verify, after verify, after the round;
    verify, removed, kept: (rounds, layers, heads) largest |Δ| of what verify wrote (② − ①), of what the
    rollback took back (② − after) and of what the round kept (after − ①); rolled_back: (rounds,) bools;
    select: the run's rollback keeps slots (it draws "what the round kept", recompute does not).
    Panels counted: the three memories and what verify wrote in every round; in a rolled-back round also
    what was taken back, both against the changes' scale and against the memory's own (so the polluted
    and the rolled-back memories differ visibly side by side). -> (layers, heads) in [0, 1]"""
    tiny = 1e-12
    memory = states.amax(dim=(0, 1)).clamp_min(tiny)
    changes = torch.maximum(verify.amax(0), removed.amax(0)).clamp_min(tiny)
    never = torch.full_like(removed, float("inf"))
    back = rolled_back[:, None, None]
    panels = [states.amin(1) / memory, verify / changes,
              torch.where(back, removed / changes, never), torch.where(back, removed / memory, never)]
    if select:
        panels.append(kept / changes)
    return torch.stack(panels).amin(dim=(0, 1))


class WatchingTrace(Trace):
    """A qwen.trace.Trace that also looks at every DeltaNet layer and value head: each view after verify
    and after the round gets `change`, per DeltaNet layer the norm ‖ΔS‖ (all heads) of the memory since the
    view before it (after verify: what verify wrote; after: what the rollback took back). Per round it keeps
    every layer's and head's largest |value| and |Δ| (as the memory figure's grids hold them), so the
    watched layer and head can be chosen once the run is over (clearest); and each view's memory and conv
    grids of every layer and head while they fit GRIDS_BUDGET, so that the views can then be rewritten for
    the chosen one (watch) instead of recording again."""

    def __init__(self, watch_layer=0, watch_head=0, max_rounds=None):
        super().__init__(watch_layer, watch_head, max_rounds)
        self.kept, self.bytes, self.overflow = [], 0, False
        self.rounds = []                    # per round: (states (3, L, H), verify, removed, kept (L, H))
        self._last, self._round = None, []

    def view(self, state, head_cache, phase):
        v = super().view(state, head_cache, phase)
        memories = [s for s in state.layers if not isinstance(s, AttentionState)]
        if not memories:
            return v
        S = torch.stack([s.S[0] for s in memories]).float()                    # (layers, heads, Dk, Dv)
        if phase in ("after_verify", "after") and self._last is not None:
            v["change"] = [round(float(x), 5) for x in (S - self._last).flatten(1).norm(dim=-1)]
        self._last = S
        grids = pooled(S.flatten(0, 1)).view(S.shape[0], S.shape[1], -1, min(GRID, S.shape[-1]))
        if phase != "prefill":              # a round's view
            self._round = [grids] if phase == "before" else self._round + [grids]
            if phase == "after":
                before, verified, after = self._round
                self.rounds.append((_peaks(torch.stack(self._round, 0)), _peaks(verified - before),
                                    _peaks(verified - after), _peaks(after - before)))
        if not self.overflow:
            conv = pooled(torch.stack([s.conv[0] for s in memories]))
            self.bytes += grids.nbytes + conv.nbytes
            if self.bytes > GRIDS_BUDGET:
                self.overflow, self.kept = True, []
            else:
                self.kept.append((v, grids, conv, [state.layers.index(s) for s in memories]))
        return v

    def clearest(self, rolled_back, select, layer=None, head=None):
        """(DeltaNet layer, value head) whose memory figure is clearest over the recorded rounds (the
        largest faintest_panel; given a layer or a head: the best head of that layer, the best layer for
        that head), or None when no round was seen. rolled_back: per recorded round, whether it rolled back."""
        n = min(len(rolled_back), len(self.rounds))
        if n == 0:
            return None
        states, verify, removed, kept = (torch.stack(x) for x in zip(*self.rounds[:n]))
        score = faintest_panel(states, verify, removed, kept, torch.tensor(rolled_back[:n]), select)
        layers = range(score.shape[0]) if layer is None else [min(layer, score.shape[0] - 1)]
        heads = range(score.shape[1]) if head is None else [min(head, score.shape[1] - 1)]
        return max(((la, h) for la in layers for h in heads), key=lambda lh: float(score[lh]))

    def watch(self, layer, head):
        """Rewrite every kept view's memory, conv and watch as if this layer and head had been watched.
        -> False when the grids were not kept (over budget): record again with them instead."""
        if self.overflow:
            return False
        for v, grids, conv, index in self.kept:
            v["memory"], v["conv"] = as_grid(grids[layer, head]), as_grid(conv[layer])
            v["watch"] = {"layer": index[layer], "head": head}
        self.watch_layer, self.watch_head = layer, head
        return True


class TreeTrace(WatchingTrace):
    """A WatchingTrace of a draft-tree run that records each round's tree itself: it passes the round's hooks on to
    `notes` (a demo.stepper.treerec.TreeNotes) and writes what they kept into the round's own record, whose kind is
    then "tree_round" (next_token: the main model's token after the accepted path)."""

    def __init__(self, notes, watch_layer=0, watch_head=0, max_rounds=None):
        super().__init__(watch_layer, watch_head, max_rounds)
        self.notes = notes

    def drafted(self, state, tree, tokens, guesses):
        super().drafted(state, tree, tokens, guesses)
        self.notes.drafted(state, tree, tokens, guesses)

    def verified(self, state, head_cache, logits, picks, path):
        super().verified(state, head_cache, logits, picks, path)
        self.notes.verified(state, head_cache, logits, picks, path)

    def rolled_back(self, state, head_cache):
        super().rolled_back(state, head_cache)
        self.notes.rolled_back(state, head_cache)

    def add(self, record):
        if record["kind"] == "round":                   # the notes of the round just heard
            tree = self.notes.rounds[-1]
            record.update(tree, kind="tree_round", next_token=tree["picks"][tree["path"][-1]])
        super().add(record)


def as_raced(model, mtp, ids, records, settings, *, stop, chosen):
    """Give each round record its seconds on the race's path ("race_seconds": per phase, "fused" for a round run
    as one call): the same run again without a trace (a trace makes every round run step by step and copies the
    watched states), its rounds timed by the engine. The rounds are the recording's own (the same tokens, the same
    lengths: k="auto" chooses from verdicts alone); where they are not, nothing is given."""
    how, timings = sampling(settings), []
    if chosen.get("k") == "auto":
        chosen = dict(chosen, lengths=chosen["lengths"].fresh())
    stream = generate_mtp_stream(model, mtp, ids, settings.max_new_tokens, stop, **chosen,
                                 rollback=settings.rollback, timings=timings, **how)
    emitted = []
    try:
        for (emit, _, _), rec in zip(stream, records):
            emitted.append([tok for tok, _ in emit])
    finally:
        stream.close()
    if emitted != [[e["token"] for e in rec["emitted"]] for rec in records[:len(emitted)]]:
        return
    for rec, seconds in zip(records[1:], timings[1:]):
        rec["race_seconds"] = {key: v for key, v in seconds.items() if v}


def _trace_watch(model, settings):
    """The qwen.trace.Trace arguments that watch the settings' layer (a model layer number, its nearest
    DeltaNet layer) and head (-1: the first, until the clearest is chosen)."""
    deltanet = deltanet_layers(model.cfg)
    return {"watch_layer": nearest_deltanet(settings.watch_layer, deltanet) if settings.watch_layer >= 0 else 0,
            "watch_head": max(0, settings.watch_head), "max_rounds": MAX_ROUNDS}


def record_run(model, mtp, chat, ids, settings, model_name="", *, max_seconds=None, progress=None,
               clock=time.perf_counter, context=None):
    """Run speculative decoding once with a trace and keep everything the stepper shows, for a chain of k or
    the settings' draft tree. ids: (1, T). progress(done, total) hears about each round; max_seconds caps the
    wall-clock time. A chain run then gets this host's costs: the race's cost terms for these settings on this
    engine, read from the one table as the race reads them (demo.race.calibrate, within `context` positions as
    the race's: measured once per model, host and settings and kept, the prompt's pass timed for this prompt), so
    the what-if predicts from the very entry the race's verdict predicts from, not from the recording's slower
    instrumented times. A tree run's rounds also hold demo.stepper.treerec's notes, written into each round's
    record by its TreeTrace ("tree_round" records); it gets no cost terms (its what-if is not drawn), only the
    plain step timed by the one pass timer (qwen.costs.time_pass)."""
    watch = _trace_watch(model, settings)
    chosen = (watch["watch_layer"] if settings.watch_layer >= 0 else None,      # None: the recording chooses
              settings.watch_head if settings.watch_head >= 0 else None)
    notes = TreeNotes(model, *chosen, sampling(settings)) if settings.tree else None
    trace = TreeTrace(notes, **watch) if notes else WatchingTrace(**watch)
    stop = tuple(chat.stop)
    out, ended, t0 = [], "", clock()
    how = sampling(settings)
    auto = dict(k="auto", lengths=lengths_for(model, mtp, settings.k, bool(how.get("temperature")))) \
        if settings.auto and not notes else {"k": settings.k}
    stream = generate_mtp_stream(model, mtp, ids, settings.max_new_tokens, stop, **auto, rollback=settings.rollback,
                                 trace=trace, tree=settings.tree or None, **how)
    try:
        for emit, _, _ in stream:
            out += [t for t, _ in emit]
            if progress:
                progress(len(out), settings.max_new_tokens)
            if max_seconds and clock() - t0 > max_seconds and len(out) < settings.max_new_tokens:
                ended = "time"
                break
            if len(trace) > MAX_ROUNDS:
                ended = "rounds"
                break
    finally:
        stream.close()              # ends the engine's generator now, also when progress() or the engine raised
    records = list(trace)[:MAX_ROUNDS + 1]
    out = [e["token"] for rec in records for e in rec["emitted"]]
    best = None
    if None in chosen and not notes:            # a chain's watched layer or head left to the recording: the clearest
        best = trace.clearest([rec["rolled_back"] for rec in records[1:]], settings.rollback == "select", *chosen)
    if best is not None:
        layer, head = best
        if not trace.watch(layer, head):          # too big to keep every head's grids: record again, watching it
            again = replace(settings, watch_layer=deltanet_layers(model.cfg)[layer], watch_head=head)
            run = record_run(model, mtp, chat, ids, again, model_name, max_seconds=max_seconds, progress=progress,
                             clock=clock)
            return replace(run, settings=settings)
    if not ended:
        ended = "stop" if out and out[-1] in stop else "length"
    prompt_ids = ids[0].tolist()
    labels = {i: token_label(chat, i) for i in record_ids(records) | set(prompt_ids) | set(out)}
    if len(records) > 1 and not notes:      # chain rounds: each one's time as the race runs it
        as_raced(model, mtp, ids, records, settings, stop=stop, chosen=auto)
    costs, step = None, None
    if len(records) > 1 and not notes:      # chain rounds: the race's cost terms for them (measured once, kept)
        found = calibrate(model, mtp, ids, settings, context=context)[0]
        costs, step = found.terms(), found.step
    if step is None:
        step = time_pass(model, {"step": Pass(1)}, prompt=ids.shape[1])["step"]
    return Run(settings=replace(settings, k=parse_tree(settings.tree).depth) if notes else settings,
               model_name=model_name, prompt_ids=prompt_ids, output_ids=out, pieces=token_pieces(chat.decode, out),
               labels=labels, records=records, stop_ids=list(stop), plain_step_seconds=step, costs=costs, ended=ended,
               draft=draft_summary(mtp, model.cfg.vocab_size, prompt_ids + out))


# --- the skip-the-restore proof -----------------------------------------------------------------------

@dataclass
class Proof:
    """Three greedy runs of the same prompt: plain decoding, speculative with the restore, without it."""
    plain: list
    restored: list
    skipped: list
    first_diff: int = None            # first index where `skipped` departs from `plain`; None: never
    first_diff_round: int = None      # the skipped run's round that emitted that token
    restored_ok: bool = True          # restored == plain, token for token
    restored_diff: int = None         # where restored departs from plain (a bug in the engine), else None
    drift: list = field(default_factory=list)     # per round of the skipped run: max |memory - correct|
    pieces: dict = field(default_factory=dict)    # name -> per-token text


def first_difference(a, b):
    """Index of the first position where two token lists differ, or None. Only their common length is
    compared: a run cut short by the time limit is not a difference (a stop token is in the list)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def memory_drift(correct, dirty):
    """Per round of the dirty trace: the largest difference between its watched memory after the round
    and the correct run's at the same position (rounds at positions the correct run never had: None)."""
    by_pos = {r["states"]["after"]["pos"]: r["states"]["after"]["memory"] for r in correct}

    def gap(after):
        ref = by_pos.get(after["pos"])
        return None if ref is None else max(abs(x - y) for row, ref_row in zip(after["memory"], ref)
                                            for x, y in zip(row, ref_row))
    return [gap(r["states"]["after"]) for r in dirty]


def round_of_token(records, index):
    """The round whose accept phase emitted output token `index` (0 = the prefill), or None."""
    if index is None:
        return None
    seen = 0
    for rec in records:
        seen += len(rec["emitted"])
        if index < seen:
            return rec["round"]
    return None


def _take(stream, seconds, clock=time.perf_counter):
    """Token ids from a generation stream (plain: ids; speculative: (emitted, rounds, hits)) until it
    ends or `seconds` have passed."""
    out, t0 = [], clock()
    for item in stream:
        out += [t for t, _ in item[0]] if isinstance(item, tuple) else [item]
        if seconds and clock() - t0 > seconds:
            break
    stream.close()
    return out


def skip_restore_proof(model, mtp, chat, ids, settings, *, min_tokens=PROOF_TOKENS, max_seconds=None):
    """Greedy plain decoding vs speculative with `settings.rollback` vs speculative with rollback="none"
    (KV truncated, DeltaNet memory and conv window left as the rejected drafts wrote them), drafting a chain of
    k or the settings' tree. Each of the three runs gets a third of `max_seconds`; tokens are compared over the
    length all of them reached."""
    n = max(settings.max_new_tokens, min_tokens)
    n = min(n, model.cfg.max_position_embeddings - ids.shape[1] - settings.k - 1)
    stop, share = tuple(chat.stop), max_seconds / 3 if max_seconds else None
    watch = _trace_watch(model, settings)
    runs, traces = {}, {}
    for name, rollback in (("restored", settings.rollback), ("skipped", SKIP_RESTORE)):
        traces[name] = Trace(**watch)
        runs[name] = _take(generate_mtp_stream(model, mtp, ids, n, stop, settings.k, rollback, trace=traces[name],
                                               tree=settings.tree or None), share)
    plain = _take(generate_stream(model, ids, n, stop), share)
    diff = first_difference(plain, runs["skipped"])
    restored_diff = first_difference(plain, runs["restored"])
    return Proof(plain=plain, restored=runs["restored"], skipped=runs["skipped"], first_diff=diff,
                 first_diff_round=round_of_token(traces["skipped"], diff), restored_ok=restored_diff is None,
                 restored_diff=restored_diff, drift=memory_drift(traces["restored"], traces["skipped"]),
                 pieces={name: token_pieces(chat.decode, toks) for name, toks in
                         (("plain", plain), ("restored", runs["restored"]), ("skipped", runs["skipped"]))})
