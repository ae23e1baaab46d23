"""The page's cost model (qwen.costs: every term a lane's clock counts, and what the terms predict), measured
once per model, host and settings and kept, so the race, its repeats and the stepper predict from the same terms.

    remember(model, mtp, k, rollback, costs, sampling, tree)     # demo.race.calibrate measures, then keeps
    shared(model, mtp, k, rollback, sampling, tree)              # -> Costs or None
    forget()                                                     # the next race measures again

The prompt's own pass depends on the prompt, so demo.race.calibrate times it per race (prefill_seconds).
"""
import weakref

from qwen.costs import (Costs, from_lanes, from_records, lane_prediction, per_token_slope, predict,  # noqa: F401
                        prefill_seconds, take_apart)

KEEP = 32                   # measurements the page keeps (remember)
_last = {}                  # key() -> (weak refs to the model and head, Costs): the latest measurement of each


# --- the page's measurements, one per model, host and settings ------------------------------------------------

def key(model, mtp, k, rollback, sampling=None, tree=""):
    """What a measurement depends on: the engine serving (these very modules), k (or the tree), the rollback,
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
    return (id(model), id(mtp), int(k), rollback, kind, filters, tree or "")


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
