"""The page's cost model (qwen.costs: every term a lane's clock counts, and what the terms predict), measured
once per model, host and settings and kept, so the race, its repeats and the stepper predict from the same terms.

    remember(model, mtp, k, rollback, costs, sampling, tree)     # demo.race.calibrate measures, then keeps
    shared(model, mtp, k, rollback, sampling, tree)              # -> Costs or None
    forget()                                                     # the next race measures again

The prompt's own pass depends on the prompt, so demo.race.calibrate times it per race (prefill_seconds).
speedup_at / break_even: what the terms predict at an acceptance rate (the stepper's what-if curve).
"""
import weakref

from qwen.costs import (Costs, from_lanes, from_records, per_token_slope, predict, prefill_seconds,  # noqa: F401
                        take_apart)

KEEP = 32                   # measurements the page keeps (remember)
_last = {}                  # key() -> (weak refs to the model and head, Costs): the latest measurement of each


# --- the page's measurements, one per model, host and settings ------------------------------------------------

def key(model, mtp, k, rollback, sampling=None, tree=""):
    """What a measurement depends on: the engine serving (these very modules), k ("auto" too) or the tree, the rollback,
    and how tokens are picked (greedy however spelled; shared noise or a generator: the pick costs differ).
    Not the prompt: the terms are a host's, and the prompt's own pass is measured on its own."""
    how = dict(sampling or {})
    if not how.get("temperature"):
        kind = "greedy"
    elif how.get("generator") is not None:
        kind = "rejection"
    else:
        kind = "shared"
    filters = (how.get("top_k"), how.get("top_p"))
    return (id(model), id(mtp), k if k == "auto" else int(k), rollback, kind, filters, tree or "")


def remember(model, mtp, k, rollback, costs, sampling=None, tree=""):
    """Keep `costs` as the page's measurement of these settings (the race measures, the stepper reads:
    one cost model for the page, so both predict the same speed-up). The oldest go past KEEP."""
    _last[key(model, mtp, k, rollback, sampling, tree)] = (weakref.ref(model), weakref.ref(mtp), costs)
    while len(_last) > KEEP:
        _last.pop(next(iter(_last)))


def shared(model, mtp, k, rollback, sampling=None, tree=""):
    """The page's measurement of these settings (remember), or None."""
    model_ref, mtp_ref, costs = _last.get(key(model, mtp, k, rollback, sampling, tree), (None, None, None))
    return costs if model_ref is not None and model_ref() is model and mtp_ref() is mtp else None


def forget():
    """Drop every kept measurement (the next race measures again)."""
    _last.clear()


def lane_prediction(costs, run):
    """The speed-up `costs` predict for a finished speculative lane (a demo.race.Run): its tokens, rounds
    and rolled-back rounds, its prompt's pass included (qwen.costs.predict)."""
    return predict(costs, run.per_round, run.rolled_back_share, len(run.tokens), run.rounds)


# --- what the terms predict at an acceptance rate (the stepper's what-if) ------------------------------------

def tokens_per_round(a, k):
    """Expected tokens a round yields with k guesses each accepted with probability a (independently):
    1 + a + a^2 + ... + a^k = (1 − a^(k+1)) / (1 − a)."""
    return k + 1.0 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def speedup_at(a, k, costs, tokens=None):
    """Predicted speed-up over plain decoding at acceptance a, by the race's cost model (qwen.costs.predict):
    the tokens a round yields at a, the share of rounds that roll back being 1 − a^k; for a run of `tokens`
    tokens (each lane's prompt pass included, as the race predicts), else the steady state."""
    m = tokens_per_round(a, k)
    return predict(costs, m, 1 - a ** k, tokens=tokens, rounds=(tokens - 1) / m if tokens else None)


def break_even(k, costs, steps=1000, tokens=None):
    """Smallest acceptance rate at which speculative decoding is no slower than plain; None if never."""
    for i in range(steps + 1):
        if speedup_at(i / steps, k, costs, tokens) >= 1.0:
            return i / steps
    return None
