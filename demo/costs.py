"""The page's side of the cost model (qwen.costs: every term a lane's clock counts, and what the terms predict).
The terms are measured once per model, host and settings and kept in the engine's one cost table
(qwen.costs.TABLE: demo.race.calibrate measures with the race's own lanes), so the race, its repeats, the stepper
and k="auto" predict from the same terms.

    lane_prediction(costs, run)          # the speed-up the terms predict for a finished race lane
    speedup_at(a, k, costs) / break_even(k, costs)     # what they predict at an acceptance rate (the what-if)
"""
from qwen.costs import (TABLE, Costs, from_lanes, from_records, measure, per_token_slope, predict,  # noqa: F401
                        prefill_seconds, take_apart)


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
