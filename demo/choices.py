"""What a visitor may choose, once for both views (the race and the stepper): every number's range and default,
the rollbacks, sampling's rules, k="auto", the draft trees offered; and a token's origins (the page's marks).
demo.validate checks a visitor's input against them.
"""
from qwen.mtp import ROLLBACKS as ENGINE_ROLLBACKS     # every rollback the engine knows, "none" included

# every number a visitor may set: (lowest, highest, default); the stepper's own max_new_tokens is
# demo.stepper.ui.LIMITS (its runs are recorded whole, so they are shorter)
LIMITS = {
    "max_new_tokens": (1, 512, 120),
    "k": (1, 4, 2),
    "temperature": (0.0, 2.0, 0.0),
    "seed": (0, 2**31 - 1, 0),
    "watch_layer": (-1, 255, -1),       # the stepper's watched DeltaNet layer and head (-1: the one whose
    "watch_head": (-1, 255, -1),        # memory changes most in the recorded run)
}
SKIP_RESTORE = "none"                   # the engine's deliberately wrong rollback (the stepper's proof only)
# how the engine may roll a DeltaNet memory back after a rejected draft, as a visitor chooses it
ROLLBACKS = tuple(r for r in ENGINE_ROLLBACKS if r != SKIP_RESTORE)
BOTH = "both"                           # the race only: run each of ROLLBACKS as its own speculative lane
RACE_ROLLBACKS = ROLLBACKS + (BOTH,)
ORIGINS = ("main", "draft", "correction", "bonus")
# how speculative sampling decides (temperature > 0): "shared" noise (the text of plain sampling with the
# seed; qwen.sample.coupled_pick), or "rejection" sampling (the same distribution, other text)
RULES = ("shared", "rejection")
# the race page's starting temperature: sampling at 0.5 with shared noise (and the seed's default) reads far
# better than greedy decoding, which loops on the embedded model ("and the LORD, and the LORD, ..."), still
# writes plain sampling's text, and, compiled, races faster than plain sampling (docs/benchmarks.md, 2026-12-03)
PAGE_TEMPERATURE = 0.5


# k="auto" (qwen.adaptive): the race's chain lanes choose each round's draft length, from none up to this
AUTO = "auto"
AUTO_MAX_K = 3


# the race's draft-tree lane: a third speculative lane drafting a tree of this shape (qwen.tree.parse_tree) each
# round, beside the chain of k; "" = no tree lane. The stepper's tree mode offers the same shapes
TREES = ("", "2+1", "2+1+1", "2x2")


def lane_rollbacks(rollback):
    """The rollback of each speculative lane of a race, in running order: ("recompute", "select") for
    "both" (recompute first, so the lane without re-runs comes last, beside it), else (rollback,)."""
    return ("recompute", "select") if rollback == BOTH else (rollback,)
