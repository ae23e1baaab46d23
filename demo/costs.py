"""What a speculative round costs on this host, in plain decoding steps, and the speed-up that predicts.

    costs = measure(model, mtp, ids, k=2, rollback="select")    # a short traced run + timed plain steps
    each = measure_each(model, mtp, ids, 2, ("recompute", "select"))   # {rollback: Costs}, one plain step timing
    shared(model, mtp, ids, 2, "select")                          # the page's last measurement of these, or None
    costs.ratios()        -> {"verify": 1.17, "draft": 0.11, ...}   each ÷ one plain step
    predict(costs, tokens_per_round=2.4, rolled_back=0.4)         -> 2.4 / (1.17 + 2 × 0.11 + ...) = 1.7

A round runs the draft head k times, the main model once over k+1 tokens, and (recompute) takes a
snapshot and, after a rejection, restores it and re-runs the accepted tokens. Plain decoding runs
the main model once per token. So the speed-up is tokens per round ÷ round cost in plain steps: on
a GPU, where a pass over 3 tokens costs about one step, 2.4 tokens per round is nearly 2.4x; on a
CPU whose matrix kernels pay per row, a pass over 3 tokens can cost 2 steps and the gain vanishes.

The costs come from the engine's own per-round timings (qwen.trace records `seconds`), medians over
a few rounds after a warm-up one, so one slow round does not move them. A traced round runs step by
step; where the race runs each greedy `select` round as one call instead (qwen.mtp.greedy_round,
compiled on small models), that call is timed as a whole too (`whole`), and it is what the round costs.
"""
import statistics
import time
import weakref
from dataclasses import asdict, dataclass

from qwen.mtp import generate_mtp_stream, rounds_in_one_call
from qwen.sample import generate_stream
from qwen.trace import Trace

ROUNDS = 6                  # rounds timed by measure() (after one warm-up round)
KEEP = 32                   # measurements the page keeps (shared)
_last = {}                  # key() -> (weak refs to the model and head, Costs): the latest measurement of each


@dataclass
class Costs:
    """Seconds on this host. Per round, step by step: draft (k head passes), verify (one pass over k+1
    tokens), snapshot; back / keep: restore + re-run of a round that rolled back / that did not.
    whole: a round run as one call (greedy `select`, qwen.mtp.greedy_round), or 0 where rounds run step
    by step; when set, it is the round's cost and the others only take it apart."""
    k: int
    rollback: str
    step: float                 # one plain decoding step (one token through the main model)
    draft: float
    verify: float
    snapshot: float = 0.0
    back: float = 0.0
    keep: float = 0.0
    whole: float = 0.0

    def round_seconds(self, rolled_back=0.0):
        """Mean seconds of a round when a share `rolled_back` of rounds reject a draft."""
        if self.whole:
            return self.whole
        return self.draft + self.verify + self.snapshot + rolled_back * self.back + (1 - rolled_back) * self.keep

    def ratios(self, rolled_back=0.0):
        """Each cost ÷ one plain step: verify, draft (per head pass), draft_round (all k), rollback, round
        (the whole round: its one call where it runs as one, else the sum of its parts)."""
        step = max(self.step, 1e-12)
        return {"verify": self.verify / step, "draft": self.draft / self.k / step, "draft_round": self.draft / step,
                "rollback": (self.snapshot + rolled_back * self.back + (1 - rolled_back) * self.keep) / step,
                "round": self.round_seconds(rolled_back) / step}

    def as_dict(self):
        return {key: (round(v, 7) if isinstance(v, float) else v) for key, v in asdict(self).items()}


def predict(costs, tokens_per_round, rolled_back=0.0):
    """Speed-up over plain decoding that these costs predict for rounds yielding `tokens_per_round`
    tokens, a share `rolled_back` of which rejected a draft. Prefill is left out of both sides."""
    return tokens_per_round / max(costs.ratios(rolled_back)["round"], 1e-12)


def _median_interval(stream, n):
    """Median seconds between successive items of a generator, over n intervals after its first item
    (prefill) and one more as a warm-up; fewer if it ends first. The generator is closed."""
    times = []
    try:
        next(stream)
        t = time.perf_counter()
        for _ in range(n + 1):
            next(stream)
            now = time.perf_counter()
            times.append(now - t)
            t = now
    except StopIteration:                                    # the context ran out first
        pass
    finally:
        stream.close()
    return statistics.median(times[1:] or times) if times else 0.0


def time_plain_step(model, ids, repeats=5):
    """Median seconds from one token to the next of plain greedy decoding after the prompt `ids`
    (1, T), the way the race runs it (generate_stream: the step and its Python)."""
    return _median_interval(generate_stream(model, ids, repeats + 3), repeats)


def from_records(records, k, rollback, step):
    """Costs from a trace's round records: medians per round, the first round left out as a warm-up
    when there are more."""
    rounds = [r for r in records if r.get("kind") == "round"]
    rounds = rounds[1:] if len(rounds) > 1 else rounds
    if not rounds:
        return Costs(k, rollback, step, 0.0, step)

    def median(key, rows):
        return statistics.median(r["seconds"].get(key, 0.0) for r in rows) if rows else 0.0

    def undo(rows):
        return statistics.median(r["seconds"].get("restore", 0.0) + r["seconds"].get("rerun", 0.0)
                                 for r in rows) if rows else None
    back, keep = undo([r for r in rounds if r["rolled_back"]]), undo([r for r in rounds if not r["rolled_back"]])
    back = back if back is not None else (keep or 0.0)
    keep = keep if keep is not None else 0.0
    return Costs(k, rollback, step, median("draft", rounds), median("verify", rounds), median("snapshot", rounds),
                 back, keep)


def _run_length(model, ids, k, rounds):
    """New tokens enough for `rounds` + 1 rounds (each yields at most k+1) within the model's context."""
    limit = model.cfg.max_position_embeddings - ids.shape[1] - k - 2
    return max(2, min((rounds + 1) * (k + 1) + 1, limit))


def time_whole_rounds(model, mtp, ids, k, rounds=ROUNDS, sampling=None):
    """Median seconds from one round's tokens to the next's of an untraced `select` run (greedy, or with
    these sampling arguments), the way the race runs it (each round one call, where rounds_in_one_call)."""
    return _median_interval(generate_mtp_stream(model, mtp, ids, _run_length(model, ids, k, rounds), (), k, "select",
                                                **(sampling or {})), rounds)


def measure(model, mtp, ids, k, rollback="select", rounds=ROUNDS, step=None, sampling=None):
    """Time a short speculative run of `rounds` rounds (+1 warm-up) on the prompt `ids` (1, T), and
    plain steps (unless `step`, seconds of one, is given). It ignores stop tokens, so it always runs
    its rounds. Where a run with this rollback and these sampling arguments (the engine's: temperature,
    seed, ...) makes each round one call, such rounds are timed as well (Costs.whole)."""
    trace = Trace(max_rounds=rounds + 2)
    stream = generate_mtp_stream(model, mtp, ids, _run_length(model, ids, k, rounds), (), k, rollback, trace=trace)
    try:
        for _ in stream:
            if len(trace) > rounds + 1:
                break
    finally:
        stream.close()
    c = from_records(list(trace), k, rollback, step if step is not None else time_plain_step(model, ids))
    if rounds_in_one_call(model, mtp, k, rollback, sampling):
        c.whole = time_whole_rounds(model, mtp, ids, k, rounds, sampling)
    return c


def measure_each(model, mtp, ids, k, rollbacks, rounds=ROUNDS, sampling=None):
    """measure() for each rollback, all against one timing of a plain step (so their ratios compare).
    -> {rollback: Costs}. Each rollback adds only its `rounds` + 1 traced rounds (and as many untraced
    ones where rounds run as one call)."""
    step = time_plain_step(model, ids)
    each = {rollback: measure(model, mtp, ids, k, rollback, rounds, step, sampling) for rollback in rollbacks}
    for rollback, c in each.items():
        remember(model, mtp, ids, k, rollback, c, sampling)
    return each


def key(model, mtp, ids, k, rollback, sampling=None):
    """What a measurement depends on: the engine serving (these very modules), the prompt, k, the
    rollback and the sampling arguments (greedy whatever its spelling; a generator by its seed)."""
    how = dict(sampling or {})
    if not how.get("temperature"):
        how = {}                                    # greedy, however it is spelled
    if how.get("generator") is not None:            # rejection sampling: a fresh generator per run, from its seed
        how["generator"] = how["generator"].initial_seed()
    return (id(model), id(mtp), tuple(ids[0].tolist()), int(k), rollback, tuple(sorted(how.items())))


def remember(model, mtp, ids, k, rollback, costs, sampling=None):
    """Keep `costs` as the page's measurement of these settings (the race's lanes measure, the stepper
    reads it: one cost model for the page, so both predict the same speed-up). The oldest go past KEEP."""
    _last[key(model, mtp, ids, k, rollback, sampling)] = (weakref.ref(model), weakref.ref(mtp), costs)
    while len(_last) > KEEP:
        _last.pop(next(iter(_last)))


def shared(model, mtp, ids, k, rollback, sampling=None):
    """The page's latest measurement of these settings (remember), or None."""
    model_ref, mtp_ref, costs = _last.get(key(model, mtp, ids, k, rollback, sampling), (None, None, None))
    return costs if model_ref is not None and model_ref() is model and mtp_ref() is mtp else None
