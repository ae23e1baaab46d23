"""Draft only as far as it pays: each round's draft length, chosen from the head's confidence and this host's costs.

A round that drafts m tokens costs seconds[m] on this host (m = 0: a plain step, the head left idle) and
yields 1 + P1 + P1·P2 + ... tokens on average, where Pj is the chance that draft j is right given the ones
before it. The head says how sure it is of each guess (its top probability, `confidence`); how often guesses
that sure turned out right so far in this run makes that a chance (`likely`). So as it drafts, each round
can stop where one more guess's expected tokens no longer pay for what it adds to the round:

    expected(m)  = 1 + P1 + P1·P2 + ... + P1·...·Pm           (tokens a round of m drafts yields)
    rate(m)      = expected(m) / seconds[m]                   (tokens per second)
    keep m       = the m with the best rate among the guesses drafted so far
    draft more   while some longer round could still beat it if every further guess were right

    lengths = DraftLengths(seconds=(1.0, 1.25, 1.45, 1.65))   # a plain step, rounds of 1, 2, 3 drafts
    lengths.keep([0.9, 0.3])          -> 1: the second guess (right 0.9·0.3 = 27% of the time) does not pay
    tokens, rounds, hits = generate_mtp(model, head, ids, k="auto", max_k=3)   # qwen.mtp: same output as plain

A round that keeps no draft is a plain step. After REST_AFTER of them in a row the head rests: the next rounds
are plain steps without it (1, 2, 4, ... up to MAX_REST while it stays unsure), then it catches up on the tokens
it missed in one pass, and that round verifies its guess whatever the rule says (a probe, so the run keeps
learning).
So where the head is always wrong, decoding costs about what plain decoding costs.

The choice never changes the output: every round emits the main model's own tokens (greedy, or sampled with
the shared noise), whatever it verified. Under the textbook rejection rule whether guess j is verified is decided
from what was known before it was sampled (keep(prefix=True): the head's top probabilities up to its own), so
each position is still sampled from the main model.
"""
from dataclasses import dataclass, field

import torch

from qwen.tree import guess

MAX_REST = 16                # plain steps, at most, between two guesses while the head stays unsure
REST_AFTER = 1               # rounds in a row that choose none before the head rests (3 measured worse)
BINS = (0.0, 0.1, 0.3, 0.6)  # confidence bins the run learns how often guesses are right in
PRIOR = 2                    # a bin's estimate starts from the run's overall share, weighted as this many guesses


def confidence(guess, temperature=0):
    """How sure the head is of its guess: its top probability (over the draft vocabulary it scores), at
    `temperature` where sampling (1 when greedy). Read from its scores, not from the token it picked."""
    logits, _ = guess.scores
    return float(torch.softmax(logits.float() / (temperature or 1.0), -1).max())


@dataclass
class DraftLengths:
    """Seconds of a round by its draft length on this host: seconds[m] for m = 0 (a plain step) to max_k."""
    seconds: tuple
    rest: int = 0                        # plain steps left before the head guesses again
    rest_next: int = 1                   # how long the next rest lasts (doubles while the head stays unsure)
    counts: dict = field(default_factory=dict)      # rounds by the drafts they kept: {0: ..., 1: ..., ...}
    seen: list = field(default_factory=lambda: [[0, 0] for _ in BINS])   # per confidence bin: [verified, right]
    drafted: list = field(default_factory=list)     # the confidences of the drafts this round verifies
    probe: bool = False                  # the round after a rest verifies at least one guess
    probes: bool = True                  # False: never (to time plain steps alone)
    unsure: int = 0                      # rounds in a row that chose none
    decision: dict = None                # the last round's choice, as plain data (decision())

    def likely(self, c):
        """The chance a guess of confidence c is right, as this run has found so far: the share of verified
        guesses of like confidence that were right, starting from the run's share over all of them (and
        from 1/2 before any): a head's probabilities are seldom calibrated (the embedded one's 0.1 is right
        about half the time), so they only sort its guesses."""
        b = sum(c >= edge for edge in BINS[1:])
        total, right = (sum(pair[i] for pair in self.seen) for i in (0, 1))
        overall = (right + 1) / (total + 2)
        n, hits = self.seen[b]
        return (hits + PRIOR * overall) / (n + PRIOR)

    def saw(self, accepted):
        """After the verify pass: of this round's drafts (confidences in `drafted`), the first `accepted` were
        right and the next one wrong; the ones after it say nothing (they were never in question)."""
        for j, c in enumerate(self.drafted[:accepted + 1]):
            pair = self.seen[sum(c >= edge for edge in BINS[1:])]
            pair[0] += 1
            pair[1] += j < accepted
        self.drafted = []

    @property
    def max_k(self):
        return len(self.seconds) - 1

    @staticmethod
    def expected(confidences):
        """Tokens a round yields on average for each length m = 0..len: [1, 1 + c1, 1 + c1 + c1·c2, ...]."""
        out, reach = [1.0], 1.0
        for c in confidences:
            reach *= c
            out.append(out[-1] + reach)
        return out

    def rates(self, confidences):
        """Expected tokens per second for each length m = 0..len(confidences)."""
        return [e / self.seconds[m] for m, e in enumerate(self.expected(confidences))]

    def keep(self, confidences, prefix=False):
        """How many of the drafted guesses to verify: the length with the best rate (the shorter on a tie).
        prefix (the textbook rule): each guess j kept only while a round of j beats one of j - 1, judged on
        c1..cj alone. cj+1 came from the head fed guess j, so letting it decide whether guess j is verified
        would make that depend on which token was sampled, and the rule's output would no longer be the
        main model's distribution."""
        rates = self.rates(confidences)
        if prefix:
            m = 0
            while m < len(confidences) and rates[m + 1] > rates[m]:
                m += 1
            return m
        return max(range(len(rates)), key=lambda m: (rates[m], -m))

    def break_even(self, confidences):
        """For each guess j drafted, the chance that it and all before it are right (P1·...·Pj) above which
        verifying it pays: a round of j beats a round of j - 1 when expected(j)/seconds[j] > expected(j-1)/
        seconds[j-1], i.e. when P1·...·Pj > expected(j-1) · (seconds[j] / seconds[j-1] - 1).
        For the first guess: seconds[1] / seconds[0] - 1, the break-even acceptance of k = 1."""
        expected = self.expected(confidences)
        return [expected[j - 1] * (self.seconds[j] / self.seconds[j - 1] - 1) for j in range(1, len(expected))]

    def more(self, confidences):
        """Draft another guess? Only if some longer round, every further guess right, could beat the best so far."""
        j = len(confidences)
        if j >= self.max_k:
            return False
        expected = self.expected(confidences)
        best = max(self.rates(confidences))
        reach = expected[-1] - expected[-2] if j else 1.0          # the chance all j drafts are right
        return any((expected[-1] + (m - j) * reach) / self.seconds[m] > best for m in range(j + 1, self.max_k + 1))

    def choose(self, confidences, prefix=False):
        """keep(), counted: REST_AFTER choices of none in a row make the head rest, each time longer; after a rest
        one guess is verified all the same (a probe: else a run that starts badly would never learn more)."""
        best = self.keep(confidences, prefix)
        m = max(best, min(int(self.probe and self.probes), len(confidences)))
        self.counts[m] = self.counts.get(m, 0) + 1
        self.probe = False
        self.unsure = 0 if best else self.unsure + 1
        if best:
            self.rest_next = 1
        elif self.unsure >= REST_AFTER:
            self.rest, self.rest_next = self.rest_next, min(2 * self.rest_next, MAX_REST)
        return m

    def resting(self):
        """Is this round a plain step with the head idle? (counts it off)"""
        if self.rest:
            self.rest -= 1
            self.counts[0] = self.counts.get(0, 0) + 1
            self.probe = self.rest == 0
            return True
        return False

    def fresh(self):
        """The same costs, for a new run (no rest, no counts)."""
        return DraftLengths(tuple(self.seconds))


def fixed_length(m, max_k):
    """Costs under which every round keeps exactly m drafts (while the head's confidence is above 0): for
    measuring a round of each length, and for tests."""
    return DraftLengths(tuple(1.0 if i == m else 1e9 for i in range(max_k + 1)), probes=False)


def draft_chain(mtp, model, first, P, head_cache, sampling, lengths):
    """A chain drafted only as far as it pays, for a round whose first token is at position P; first: the
    head's guess after it (None while the head rests). -> [None (the root), Guess for draft 1, ...], the
    drafts `lengths.keep` keeps (only the root: a plain step). The choice is counted in `lengths`."""
    if first is None:
        lengths.decision = {"rested": True, "kept": 0, "steps": [round(x / lengths.seconds[0], 4)
                                                                  for x in lengths.seconds]}
        return [None]
    temperature = sampling.get("temperature") or 0
    guesses, raw = [None, first], [confidence(first, temperature)]
    sure = [lengths.likely(raw[0])]
    while lengths.more(sure):                       # the head fed its own output, as a chain is drafted
        last, j = guesses[-1], len(guesses) - 1
        guesses.append(guess(mtp, model, last.out, torch.tensor([[last.token]], device=last.out.device),
                             P + j - 1, head_cache, sampling))
        raw.append(confidence(guesses[-1], temperature))
        sure.append(lengths.likely(raw[-1]))
    prefix, probing = bool(temperature) and sampling.get("seed") is None, lengths.probe and lengths.probes
    m = lengths.choose(sure, prefix)
    lengths.drafted = raw[:m]
    lengths.decision = decision(lengths, raw, sure, m, probe=probing and m > lengths.keep(sure, prefix))
    return guesses[:m + 1]


def decision(lengths, raw, sure, kept, probe=False):
    """A round's choice as plain data (the stepper draws it): per guess drafted its confidence, its chance of
    being right, the chance all up to it are (reach) and the reach above which it pays (break_even); how
    many were kept (probe: more than the rule chose, a probe after a rest); a round's seconds per length in
    plain steps."""
    reach = [e - prev for prev, e in zip(lengths.expected(sure), lengths.expected(sure)[1:])]
    return {"confidence": [round(c, 4) for c in raw], "chance": [round(p, 4) for p in sure],
            "reach": [round(r, 4) for r in reach], "break_even": [round(b, 4) for b in lengths.break_even(sure)],
            "kept": kept, "probe": probe, "steps": [round(x / lengths.seconds[0], 4) for x in lengths.seconds]}
