"""Draft only as far as it pays: each round's length chosen before it drafts, from how often the head has lately
been right at each position and what a round of each length costs on this host.

Known before a round drafts anything:

    a_j          the chance draft j is right when drafts 1..j-1 were: the share of recent rounds that verified a
                 j-th draft and found it right (each position its own, the latest rounds weighing most)
    seconds[m]   a round of m drafts on this host, as the engine runs it (m = 0: a plain step, the head idle)
    expected(m)  = 1 + a1 + a1·a2 + ... + a1·...·am        tokens a round of m drafts yields on average
    keep m       = the m with the most expected(m) / seconds[m] (the shorter on a tie)

Because the length is chosen before drafting, the round that follows is the fixed-k round of that length: where
the engine runs a `select` round as one compiled call, an auto round is that call too. And the choice reads only
verdicts on tokens already emitted, so it changes no output: greedy and shared-noise rounds emit the main model's
own tokens, and the textbook rule's stopping point is fixed before the drafts it judges are sampled.

    lengths = DraftLengths(seconds=(1.0, 1.25, 1.45, 1.65))   # a plain step, rounds of 1, 2, 3 drafts
    lengths.keep([0.9, 0.3, 0.3])     -> 1: the second draft (right 0.9·0.3 = 27% of the time) does not pay
    tokens, rounds, hits = generate_mtp(model, head, ids, k="auto", max_k=3)   # qwen.mtp: same output as plain

A round of none is a plain step, and the head rests: it sits out that step and, while the rule keeps choosing
none, FIRST_REST, twice that, ... up to MAX_REST more, then catches up on the tokens it missed in one pass and the
next round drafts whatever the rule says (a probe, at the best drafting length: else a run that starts badly would
never learn otherwise).
So where the head is always wrong, decoding costs about what plain decoding costs.
"""
from dataclasses import dataclass, field

# Chosen in simulation over ten prompts (the length bench's five and five held out): each position's verdicts on
# the embedded head replayed under a round's compiled costs (docs/benchmarks.md, 2026-12-06 third session).
MAX_REST = 32      # plain steps, at most, between two probes while the head stays wrong
FIRST_REST = 4     # plain steps in the first rest
MEMORY = 0.9       # each verdict's weight falls by this much with every later round (about ten rounds' memory)
PRIOR = 4.0        # the first position starts at START, weighted as this many verdicts
LEAN = 2.0         # a later position leans on the one before it as this many verdicts would
REST_BELOW = 0.85  # rest the head only where drafting is expected to run below this share of plain decoding's speed
START = 0.9        # the first position's chance before any verdict: hopeful, so a run starts drafting and learns


@dataclass
class DraftLengths:
    """Seconds of a round by its draft length on this host (seconds[m], m = 0: a plain step .. max_k), and what
    this run has seen of the head: the chooser of k="auto". only: always m drafts (to time a round of m)."""
    seconds: tuple
    only: int = None
    rest: int = 0                        # plain steps left in the current rest
    rest_next: int = None                # how long the next rest lasts (FIRST_REST, doubling while the head stays wrong)
    probe: bool = False                  # the next round verifies at least one draft (the head is back from a rest)
    counts: dict = field(default_factory=dict)       # rounds by their drafts {0: ..., 1: ..., ...}
    seen: list = None                    # per position j = 1..max_k: [weight of verdicts, weight of right ones]
    decision: dict = None                # the last round's choice, as plain data (decision())

    def __post_init__(self):
        self.rest_next = self.rest_next or FIRST_REST
        if self.seen is None:          # the first position: START, as if PRIOR verdicts said so (they fade like real ones)
            self.seen = [[PRIOR, PRIOR * START]] + [[0.0, 0.0] for _ in range(self.max_k - 1)]

    @property
    def max_k(self):
        return len(self.seconds) - 1

    def chances(self):
        """[a_1, ..., a_max_k]: each position's share of right drafts, the latest verdicts weighing most; a later
        position leans on the one before it, as LEAN verdicts would, until its own verdicts outweigh that."""
        out = []
        for n, right in self.seen:
            out.append((right + LEAN * out[-1]) / (n + LEAN) if out else right / n)
        return out

    def saw(self, verified, accepted):
        """After a round that verified `verified` drafts and kept the first `accepted`: positions 1..accepted were
        right, the one after wrong; those after it were never in question. Every round's verdicts, these or none,
        fade all older ones by MEMORY, so a position left untested leans again on the one before it."""
        for j, pair in enumerate(self.seen):
            pair[0] *= MEMORY
            pair[1] *= MEMORY
            if j < min(accepted + 1, verified):
                pair[0] += 1
                pair[1] += j < accepted

    @staticmethod
    def expected(chances):
        """Tokens a round yields on average for each length m = 0..len: [1, 1 + a1, 1 + a1 + a1·a2, ...]."""
        out, reach = [1.0], 1.0
        for a in chances:
            reach *= a
            out.append(out[-1] + reach)
        return out

    def rates(self, chances):
        """Expected tokens per second for each length m = 0..len(chances)."""
        return [e / self.seconds[m] for m, e in enumerate(self.expected(chances))]

    def best_drafting(self, chances):
        """The length of 1..max_k with the best rate (the shorter on a tie)."""
        rates = self.rates(chances)
        return max(range(1, len(rates)), key=lambda m: (rates[m], -m))

    def keep(self, chances):
        """best_drafting, or none where even its rate is below REST_BELOW times a plain step's (resting costs a
        catch-up and a probe, not counted in the rates)."""
        best, rates = self.best_drafting(chances), self.rates(chances)
        return best if rates[best] >= REST_BELOW * rates[0] else 0

    def pays_above(self, chances):
        """For each position j, the chance that drafts 1..j are all right (a1·...·aj) above which a round of j
        beats one of j - 1: expected(j)/seconds[j] > expected(j-1)/seconds[j-1] exactly when a1·...·aj >
        expected(j-1) · (seconds[j] / seconds[j-1] - 1). For j = 1: the break-even acceptance of k = 1."""
        expected = self.expected(chances)
        return [expected[j - 1] * (self.seconds[j] / self.seconds[j - 1] - 1) for j in range(1, len(expected))]

    def choose(self):
        """This round's drafts (0: a plain step, the head idle), counted and said in `decision`."""
        if self.only is not None:
            m, self.decision = self.only, None
        elif self.rest:                                  # resting: a plain step, no question asked
            self.rest -= 1
            self.probe = self.rest == 0
            m, self.decision = 0, {"rested": True, "kept": 0, "steps": self.steps()}
        else:
            chances = self.chances()
            best = self.keep(chances)
            m = best or (self.best_drafting(chances) if self.probe else 0)     # a probe: the cheapest way to learn
            self.decision = decision(self, chances, m, probe=m > best)
            self.probe = False
            if best:
                self.rest_next = FIRST_REST
            else:                                        # this step, then a rest: longer each time it comes back
                self.rest, self.rest_next = self.rest_next, min(2 * self.rest_next, MAX_REST)
        self.counts[m] = self.counts.get(m, 0) + 1
        return m

    def steps(self):
        """A round's seconds by length, in plain steps."""
        return [round(x / self.seconds[0], 4) for x in self.seconds]

    def fresh(self):
        """The same costs, for a new run (nothing seen, no rest, no counts)."""
        return DraftLengths(tuple(self.seconds), self.only)


def fixed_length(m, max_k):
    """A chooser that drafts m every round (0: plain steps, the head idle): for timing a round of each length."""
    return DraftLengths((1.0,) * (max_k + 1), only=m)


def decision(lengths, chances, kept, probe=False):
    """A round's choice as plain data (the stepper draws it): per position the chance its draft is right (chance),
    that every draft up to it is (reach) and the reach above which drafting it pays (pays_above); how many the
    round drafts (probe: more than the rule chose, back from a rest); a round's seconds by length in plain steps."""
    expected = lengths.expected(chances)
    return {"chance": [round(a, 4) for a in chances], "reach": [round(b - a, 4) for a, b in zip(expected, expected[1:])],
            "pays_above": [round(b, 4) for b in lengths.pays_above(chances)], "kept": kept, "probe": probe,
            "steps": lengths.steps()}
