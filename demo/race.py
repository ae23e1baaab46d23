"""The race: one prompt decoded by plain greedy decoding and by MTP speculative decoding, side by side.

    ids, notices = prepare(loaded, settings)              # demo.prompts: chat template or raw text, cut to fit
    for update in race(loaded, ids, settings):            # streams RaceUpdate(phase, plain, lanes, verdict)
        ...                                               # phase: "racing" -> "measuring" -> "done"
    summary(loaded.key, update.plain, update.lanes)       # the JSON the API returns

update.lanes holds the speculative lanes, in order: the settings' rollback; with settings.rollback == "both",
`recompute` then `select` (same tokens, same rounds: what differs is what a rejected draft costs the DeltaNet
memory); with a draft tree (settings.tree), the chain then the tree. lane_key names each in the summary.

The lanes take turns in one thread (take_turns): each turn, at least 50 ms of plain decoding or of
speculative decoding, goes to the lane that has spent the least time in the engine so far. They
never run at the same time, so neither slows the other, yet they stream side by side, and a slow
moment of a shared machine falls on every lane instead of on whichever ran then (docs/design.md,
timing a race fairly; `python -m tools.race_bench` compares the schedules). A lane's
`seconds` count only its own time inside the engine (prefill included), not the other lanes' turns
nor the time the page spends drawing. Each lane stops at a stop token, at max_new_tokens, or when its
seconds reach the cap.

Tokens become text through a Detokenizer, whole characters only (demo.tokens says how).
"""
import statistics
import time
from dataclasses import dataclass, field, replace

from qwen.chat import Detokenizer
from qwen.mtp import generate_mtp_stream, lengths_for, prompt_passes
from qwen.sample import generate_stream
from qwen.trace import Trace
from qwen.tree import parse_tree

from qwen import costs
from demo import environment
from demo.gpu import device_clock
from demo.prompts import sampling
from demo.choices import lane_rollbacks


@dataclass
class Run(costs.LaneTimes):
    """One decoding run, updated in place while it streams: a timed lane (qwen.costs.LaneTimes: its `passes`, per
    main-model pass (start s, end s, new tokens) in engine time, its `origins` per token, its `seconds` inside the
    engine), with its text and counts."""
    kind: str                                   # "plain" | "speculative"
    k: int = 0
    rollback: str = ""
    tree: str = ""                              # a draft tree's shape ("2+1"; qwen.tree), "" for a chain of k
    tokens: list = field(default_factory=list)  # every new id, a final stop token included
    pieces: list = field(default_factory=list)  # per token: the text it completed (stop token: "")
    rounds: int = 0                             # speculative rounds (main-model verify passes)
    hits: int = 0                               # accepted draft tokens
    rolled_back: int = 0                        # rounds that rejected a draft (ended in a correction)
    ended: str = ""                             # "" while running | "stop" | "length" | "time"
    started: bool = False
    kept: dict = None                           # k="auto": rounds by the drafts they kept {0: n, 1: n, ...}
    draft: tuple = None                         # (ids the head's guesses score, the vocabulary's size); None: all

    @property
    def text(self):
        return "".join(self.pieces)

    @property
    def tok_s(self):
        return len(self.tokens) / self.seconds if self.seconds > 0 else 0.0

    @property
    def draft_reach(self):
        """Where the head scores a draft vocabulary: {"scored", "vocab", "cover": the share of this lane's tokens
        it holds, "outside": corrections of tokens outside it (the head could not have guessed them)}, else None."""
        if self.draft is None or not self.tokens:
            return None
        ids, vocab = self.draft
        outside = sum(1 for tok, o in zip(self.tokens, self.origins) if o == "correction" and tok not in ids)
        return {"scored": len(ids), "vocab": vocab, "cover": sum(tok in ids for tok in self.tokens) / len(self.tokens),
                "outside": outside}

    @property
    def drafted(self):
        """Draft tokens the main model verified (k a round; with k="auto", each round's own length)."""
        return sum(m * n for m, n in self.kept.items()) if self.kept is not None else self.rounds * self.k

    @property
    def acceptance(self):
        """Share of drafted tokens the main model accepted."""
        return self.hits / self.drafted if self.drafted else 0.0

    @property
    def per_round(self):
        """New tokens per speculative round, the prefill's first token left out (the rounds' yield)."""
        return (len(self.tokens) - 1) / self.rounds if self.rounds else 0.0

    @property
    def rolled_back_share(self):
        return self.rolled_back / self.rounds if self.rounds else 0.0

    @property
    def token_times(self):
        """Engine seconds at which each token appeared: the end of the pass that produced it."""
        return [end for _, end, n in self.passes for _ in range(n)]

    @property
    def per_pass(self):
        """New tokens per main-model pass (plain decoding: exactly 1)."""
        passes = self.rounds + 1 if self.kind == "speculative" else len(self.tokens)
        return len(self.tokens) / passes if passes else 0.0


@dataclass
class RaceUpdate:
    phase: str          # "racing" (the lanes take turns) | "measuring" (this host's costs) | "done"
    plain: Run
    lanes: list         # the speculative lanes, in order (the module docstring)
    verdict: "Verdict | None" = None
    lane_costs: list = field(default_factory=list)  # per lane: this host's cost terms (qwen.costs), with the verdict
    speedups: list = field(default_factory=list)    # per lane: its speed-up in every race run (repeats)
    skipped: str = ""                        # why fewer races ran than the budget allowed: "" | "busy" (others waited)

    @property
    def spec(self):
        """The first speculative lane: the settings' rollback (recompute for "both"), a chain."""
        return self.lanes[0]

    @property
    def costs(self):
        """The first lane's cost terms, or None."""
        return self.lane_costs[0] if self.lane_costs else None


def lane_key(run, index):
    """A speculative lane's name in the summary: "speculative" for the first, then "tree" or its rollback."""
    return "speculative" if index == 0 else "tree" if run.tree else run.rollback


@dataclass
class Verdict:
    identical: bool
    key: str            # an i18n key: verdict_identical | verdict_prefix | verdict_diverged | verdict_sampled...
    params: dict


# After the race shown, the same race runs again unseen while the engine time of all its races stays under
# this budget (at most REPEATS_MAX races in all): the speed-up reported is their median (with the range), which
# one race on a shared machine could not give (identical races measured 1.01-1.27x). They run while the page
# replays the race shown (about 8 s), so nobody waits for them. None: $QWEN_RACE_REPEAT_SECONDS (demo.environment,
# 5 s; the fast tests shorten it).
REPEAT_SECONDS = None
REPEATS_MAX = 15

# A turn lasts at least this much engine time. Switching lanes costs a lane some of its caches, more
# for plain decoding, whose short steps would then flatter the speed-up; 50 ms is a few switches per lane,
# still far shorter than the slow moments of a shared machine they even out
# (`python -m tools.race_bench --turns-ms 0,5,50` compares them; docs/benchmarks.md, 2026-11-30).
TURN_SECONDS = 0.05
# A lane never ends on its time cap before the prompt's pass and this many items more (tokens or rounds): the
# cost terms are measured from lanes capped at a fraction of a second, and a loaded machine must not leave
# them with nothing to measure (terms of 0 ms, a prediction of the prompt's pass alone).
MIN_ITEMS = 3


def _drive(run, stream, stop, decode, *, max_tokens, max_seconds, clock, add):
    """Pull `stream` to its end, max_tokens or the cap on the run's own seconds (once MIN_ITEMS items followed
    the prompt's pass), timing only the engine (qwen.costs.timed_items, as every lane is timed); `add(run, item,
    detok)` records an item's tokens. Yields the run after each item."""
    run.started = True
    detok = Detokenizer(decode)
    try:
        for item, seconds in costs.timed_items(stream, clock):
            had = len(run.tokens)
            add(run, item, detok)
            run.took(seconds, len(run.tokens) - had)
            if run.tokens and run.tokens[-1] in stop:
                run.ended = "stop"
            elif len(run.tokens) >= max_tokens:
                run.ended = "length"
            elif run.seconds > max_seconds and len(run.passes) > MIN_ITEMS:
                run.ended = "time"
            if run.ended:
                break
            yield run
    finally:
        stream.close()              # ends the engine's generator now (also when we are cancelled)
    if run.pieces:
        run.pieces[-1] += detok.flush()
    run.ended = run.ended or "length"
    yield run


def _add_token(run, item, detok, origin="main", stop=()):
    run.tokens.append(item)
    run.origins.append(origin)
    run.pieces.append("" if item in stop else detok.push(item))


def engine_for(loaded, settings):
    """(model, head) a race's lanes decode with, and the stepper's recording (so both read one entry of the cost
    table): the compiled views once they serve, but the eager modules for every lane when a tree lane runs (trees
    decode eagerly: all lanes alike keep the race fair)."""
    return (loaded.model, loaded.mtp) if settings.tree else loaded.engine()


def run_plain(model, ids, settings, decode, stop, *, max_seconds=120.0, clock=time.perf_counter, timings=None):
    """Plain decoding with `model`, streamed: yields the Run after each token. decode: ids -> text (the chat's;
    the cost terms' lanes show none); stop: the stop tokens; timings: a list that receives each model pass's
    seconds (qwen.sample.generate_stream)."""
    run = Run("plain")
    stream = generate_stream(model, ids, settings.max_new_tokens, stop=stop, timings=timings, **sampling(settings))
    add = lambda r, tok, detok: _add_token(r, tok, detok, "main", stop)
    yield from _drive(run, stream, stop, decode, max_tokens=settings.max_new_tokens, max_seconds=max_seconds,
                      clock=clock, add=add)


def run_speculative(model, mtp, ids, settings, decode, stop, *, max_seconds=120.0, clock=time.perf_counter,
                    rollback=None, tree="", timings=None):
    """MTP speculative decoding with `model` and its head `mtp`, streamed: yields the Run after prefill and after
    each round. rollback: the engine's rollback (default: the settings' one; for "both", its first lane's);
    tree: a draft tree's shape (the tree lane) instead of the settings' chain of k; timings: a list that
    receives each round's seconds per phase (qwen.mtp.generate_mtp_stream); decode, stop: as run_plain's."""
    rollback = rollback or lane_rollbacks(settings.rollback)[0]
    k = parse_tree(tree).depth if tree else settings.k
    run = Run("speculative", k=k, rollback=rollback, tree=tree)
    if getattr(mtp, "draft_vocab", None) is not None:            # FR-Spec: the guesses score only these tokens
        run.draft = frozenset(mtp.draft_vocab.tolist()), model.cfg.vocab_size
    how, chosen = sampling(settings), {}
    # k="auto": its counts of rounds by length fill run.kept
    if settings.auto and not tree:
        chosen = dict(k="auto", lengths=lengths_for(model, mtp, k, bool(how.get("temperature"))))
        run.kept = chosen["lengths"].counts
    stream = generate_mtp_stream(model, mtp, ids, settings.max_new_tokens, stop=stop,
                                 **({"k": k} | chosen), rollback=rollback, tree=tree or None, timings=timings, **how)

    def add(r, item, detok):
        emitted, r.rounds, r.hits = item
        for tok, origin in emitted:
            _add_token(r, tok, detok, origin, stop)
        r.rolled_back += any(origin == "correction" for _, origin in emitted)

    yield from _drive(run, stream, stop, decode, max_tokens=settings.max_new_tokens, max_seconds=max_seconds,
                      clock=clock, add=add)


def lanes_of(model, mtp, ids, settings, decode, stop, *, max_seconds, clock, rollbacks, timings=None):
    """The race's lane generators, decoding with `model` and `mtp` (engine_for): plain, a chain lane per rollback,
    and the tree lane when settings.tree. timings: one list per lane, in that order, for the engine's timings of
    each (run_plain, run_speculative)."""
    timings = timings or [None] * (1 + len(rollbacks) + bool(settings.tree))

    def speculative(rollback, tree, lane_timings):
        return run_speculative(model, mtp, ids, settings, decode, stop, max_seconds=max_seconds, clock=clock,
                               rollback=rollback, tree=tree, timings=lane_timings)

    lanes = [run_plain(model, ids, settings, decode, stop, max_seconds=max_seconds, clock=clock, timings=timings[0])]
    lanes += [speculative(r, "", t) for r, t in zip(rollbacks, timings[1:])]
    if settings.tree:
        lanes.append(speculative(rollbacks[0], settings.tree, timings[-1]))
    return lanes


# The cost terms (qwen.costs) come from lanes run for them, the race's lanes taking turns as in a race but
# ignoring stop tokens: CALIBRATE_RACES such races at most, within CALIBRATE_SECONDS of engine time, each lane
# at most CALIBRATE_TOKENS tokens. On the embedded model that is about 360 plain tokens and 150 rounds a lane,
# enough for medians that hold still on a shared 2-core machine (docs/design.md); on a big model fewer.
# CALIBRATE_SECONDS None: $QWEN_CALIBRATE_SECONDS (demo.environment, 1.5 s; the fast tests shorten it: their
# assertions need no stable terms).
CALIBRATE_RACES = 3
CALIBRATE_SECONDS = None
CALIBRATE_TOKENS = 120
STEP_BY_STEP_ROUNDS = 12        # rounds traced step by step to take a one-call round apart


def lane_specs(settings):
    """[(rollback, tree)] of the race's speculative lanes, in order."""
    rollbacks = lane_rollbacks(settings.rollback)
    return [(r, "") for r in rollbacks] + ([(rollbacks[0], settings.tree)] if settings.tree else [])


# Kept terms are measured again when a race paid more than this much more or less per plain token or per round
# than they say (the machine's load changed since), where the race allows it (nobody waits).
STALE = 0.15


def calibrate(model, mtp, ids, settings, *, context=None, clock=time.perf_counter, raced=None):
    """This host's cost terms for each speculative lane of these settings ([qwen.costs.Costs], in lane
    order) when `model` and its head `mtp` decode them (the race's: engine_for), within a context of `context`
    positions (default: the model's), measured once per model, host and settings and kept in the one cost table (qwen.costs.TABLE); the
    prompt's own pass (prefill) measured once for these `ids` and these kept terms (_with_prefill). Lanes run for it take
    turns as the race's do, with the engine's timings on (every model pass, every round's phases).
    raced: a finished race's Runs [plain, speculative...]; where one paid over STALE more or less per plain
    token or per round than the kept terms say, the terms are measured again (never fitted to that race)."""
    context = context or model.cfg.max_position_embeddings
    specs, how = lane_specs(settings), sampling(settings)
    k_of = lambda tree: parse_tree(tree).depth if tree else settings.k       # noqa: E731
    kept_as = lambda tree: "auto" if settings.auto and not tree else k_of(tree)     # noqa: E731
    found = [costs.TABLE.get(model, mtp, kept_as(tree), r, how, tree, lanes="race") for r, tree in specs]
    if all(c is not None for c in found):
        found = [_with_prefill(model, mtp, ids, settings, c) for c in found]
        if raced is None or not any(stale(c, raced[0], run) for c, run in zip(found, raced[1:])):
            return found
    found = measure_terms(model, mtp, ids, settings, context=context, clock=clock, specs=specs, k_of=k_of)
    for (r, tree), c in zip(specs, found):
        costs.TABLE.put(model, mtp, kept_as(tree), r, c, how, tree, lanes="race")
    return [_with_prefill(model, mtp, ids, settings, c) for c in found]


def stale(c, plain, spec):
    """Did this race pay over STALE more or less per plain token, or per round, than the terms `c` say?"""
    if len(plain.tokens) < 2 or not spec.rounds:
        return False
    token = (plain.seconds - c.prefill) / (len(plain.tokens) - 1)
    round_ = (spec.seconds - c.prefill_spec) / spec.rounds
    model_round = c.round_seconds(spec.rolled_back_share, spec.per_round)
    return abs(token / max(c.plain_token(), 1e-12) - 1) > STALE or abs(round_ / max(model_round, 1e-12) - 1) > STALE


def _no_text(ids):
    """The cost terms' lanes show no text."""
    return ""


def measure_terms(model, mtp, ids, settings, *, context, clock, specs, k_of):
    """The terms of each speculative lane in `specs` [(rollback, tree)], by the one timer (qwen.costs.measure): the
    race's lanes run for it, taking turns, stop tokens ignored (CALIBRATE_RACES races within CALIBRATE_SECONDS),
    the engine's timings on. -> [Costs], in lane order."""
    room = context - ids.shape[1] - 2 * max(parse_tree(settings.tree).size if settings.tree else 0,
                                                   settings.k + 1)
    timed = replace(settings, max_new_tokens=max(2, min(CALIBRATE_TOKENS, room)))
    lanes_n, budget = 1 + len(specs), CALIBRATE_SECONDS or environment.calibrate_seconds()

    def race_once():
        timings = [[] for _ in range(lanes_n)]                 # each lane's engine timings, filled as it runs
        last = [None] * lanes_n
        for i, run in take_turns(lanes_of(model, mtp, ids, timed, _no_text, (), max_seconds=budget / lanes_n,
                                          clock=clock, rollbacks=lane_rollbacks(settings.rollback), timings=timings)):
            last[i] = run
        return last, timings

    found = costs.measure(race_once, [(k_of(tree), rollback, tree) for rollback, tree in specs], CALIBRATE_RACES,
                          budget)
    return [_taken_apart(model, mtp, ids, timed, c) if c.whole else c for c in found]


def _taken_apart(model, mtp, ids, settings, c):
    """Costs whose round is one call, with that call's parts (head passes, verify) from STEP_BY_STEP_ROUNDS rounds
    traced step by step (a trace makes every round run so)."""
    trace = Trace(max_rounds=STEP_BY_STEP_ROUNDS + 2)
    stream = generate_mtp_stream(model, mtp, ids, settings.max_new_tokens, (), c.k, c.rollback,
                                 trace=trace, **sampling(settings))
    try:
        for _ in stream:
            if len(trace) > STEP_BY_STEP_ROUNDS + 1:
                break
    finally:
        stream.close()
    return costs.take_apart(c, list(trace))


def _with_prefill(model, mtp, ids, settings, c):
    """A copy of `c` with the prompt's pass in each lane timed for these ids: once per prompt and kept terms
    (qwen.costs.TABLE.with_prompt_pass), so the race and the stepper, and identical races, predict from the same
    prompt pass (a few ms that a busy machine can double)."""
    return costs.TABLE.with_prompt_pass(c, ids, prompt_passes(model, mtp, ids, c.k, c.rollback, sampling(settings),
                                                              c.tree or None))


def take_turns(lanes, quantum=TURN_SECONDS):
    """Advance several lanes (generators that yield their Run after each step) in one thread. A turn
    goes to the lane whose Run has the fewest engine seconds so far (ties: the earlier lane) and lasts
    until that lane has spent `quantum` more seconds (or has ended). Yields (lane index, Run) after
    every step; closing it closes every lane."""
    runs = [None] * len(lanes)
    live = list(range(len(lanes)))
    seconds = lambda j: runs[j].seconds if runs[j] is not None else 0.0      # noqa: E731
    try:
        while live:
            i = min(live, key=seconds)
            until = seconds(i) + quantum
            while True:
                try:
                    runs[i] = next(lanes[i])
                except StopIteration:
                    live.remove(i)
                    break
                yield i, runs[i]
                if runs[i].ended or seconds(i) >= until:
                    break
    finally:
        for lane in lanes:
            lane.close()


def one_after_another(lanes):
    """The other schedule (python -m tools.race_bench compares them): each lane to its end in turn."""
    for i, lane in enumerate(lanes):
        for run in lane:
            yield i, run


def race(loaded, ids, settings, max_seconds=120.0, *, every=0.1, clock=time.perf_counter, measure_costs=True,
         schedule=take_turns, repeat=True, busy=lambda: False):
    """The lanes, taking turns (take_turns): plain, and a speculative lane per rollback (two for
    "both"), and a tree lane. Yields a RaceUpdate at most every `every` seconds while they stream
    ("racing"), then "measuring" once the lanes have finished (the page replays them from here) while this
    host's cost terms are measured (calibrate: once per model and settings, then kept) and the race runs
    again unseen (repeats, unless repeat=False, and only while busy() says nobody waits: speedups holds
    every race's speed-up per speculative lane), and "done" with the verdict, the costs and the speed-ups."""
    rollbacks = lane_rollbacks(settings.rollback)
    runs = [Run("plain")] + [Run("speculative", k=settings.k, rollback=r) for r in rollbacks] + \
        ([Run("speculative", k=parse_tree(settings.tree).depth, rollback=rollbacks[0], tree=settings.tree)]
         if settings.tree else [])
    clock = device_clock(loaded.model, clock)          # on a GPU: seconds of finished work, not of launches

    def update(phase, **more):
        return RaceUpdate(phase, runs[0], runs[1:], **more)

    # the engine is asked for at each race (its compiled views may start serving meanwhile), as calibrate is
    new_lanes = lambda: lanes_of(*engine_for(loaded, settings), ids, settings, loaded.chat.decode,  # noqa: E731
                                 loaded.chat.stop, max_seconds=max_seconds, clock=clock, rollbacks=rollbacks)
    lanes = new_lanes()
    yield update("racing")
    last = clock()
    for i, run in schedule(lanes):
        runs[i] = run
        if clock() - last >= every:
            yield update("racing")
            last = clock()
    plain, spec_lanes = runs[0], runs[1:]
    speedups = [[speedup(plain, lane)] for lane in spec_lanes]
    yield update("measuring", speedups=speedups)
    measured = calibrate(*engine_for(loaded, settings), ids, settings, context=loaded.context, clock=clock,
                         raced=None if busy() else [plain] + spec_lanes) \
        if measure_costs and all(lane.rounds for lane in spec_lanes) else [None] * len(spec_lanes)
    skipped = "busy" if repeat and busy() else ""      # visitors wait for the engine: their turn comes first
    if repeat and not skipped:
        for again in repeats(new_lanes, [plain] + spec_lanes, schedule):
            for ratios, lane in zip(speedups, again[1:]):
                ratios.append(speedup(again[0], lane))
            if busy():
                skipped = "busy"
                break
    yield update("done", verdict=verdict(plain, spec_lanes, settings.temperature, rule=settings.rule, seed=settings.seed),
                 lane_costs=list(measured), speedups=speedups, skipped=skipped)


def repeats(new_lanes, first, schedule=take_turns):
    """The race again, unseen, its lanes (new_lanes(): lanes_of's) taking turns as in the first: yields each repeat's finished Runs
    ([plain, speculative...]) while the engine time of every race so far, `first` included, leaves room
    for one more under REPEAT_SECONDS, up to REPEATS_MAX races in all. None when a lane of `first` hit
    the time cap (a long race is reported as it ran)."""
    spent, races = sum(run.seconds for run in first), 1
    if any(run.ended == "time" for run in first):
        return
    budget = REPEAT_SECONDS or environment.race_repeat_seconds()
    while races < REPEATS_MAX and spent + spent / races <= budget:    # one more race of the mean length fits
        lanes = new_lanes()
        runs = [None] * len(lanes)
        for i, run in schedule(lanes):
            runs[i] = run
        spent, races = spent + sum(run.seconds for run in runs), races + 1
        yield runs


def verdict(plain, lanes, temperature=0.0, rule="shared", seed=0):
    """Compare the token lists of plain and each speculative lane (a list): identical, identical as far as
    both went, or where they part. With several lanes, identical means all, and a divergence names the lane.
    Sampled with shared noise (rule "shared"), the texts must be identical too, and the verdict names the
    seed and the acceptance; with rejection sampling only the distribution is the same."""
    if len(lanes) > 1:
        return _verdict_of_lanes(plain, lanes, temperature, rule, seed)
    spec = lanes[0]
    a, b = plain.tokens, spec.tokens
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    identical = a == b
    sampled = {"temperature": temperature, "seed": seed, "acceptance": f"{spec.acceptance:.0%}"}
    if temperature and rule == "rejection":
        key = "verdict_sampled_same" if identical else "verdict_sampled"
        return Verdict(identical, key, {**sampled, "n": n})
    if identical:
        if temperature:
            return Verdict(True, "verdict_shared_noise", {**sampled, "n": len(a)})
        return Verdict(True, "verdict_identical", {"n": len(a)})
    if n == min(len(a), len(b)) and "time" in (plain.ended, spec.ended):
        return Verdict(False, "verdict_prefix", {"n": n})
    return Verdict(False, "verdict_diverged",
                   {"index": n + 1, "plain": _piece_at(plain, n), "spec": _piece_at(spec, n)})


def _verdict_of_lanes(plain, lanes, temperature, rule="shared", seed=0):
    each = [verdict(plain, [lane], temperature, rule=rule, seed=seed) for lane in lanes]
    identical = all(v.identical for v in each)
    if temperature and rule == "rejection":
        return Verdict(identical, "verdict_sampled_same" if identical else "verdict_sampled",
                       {**each[0].params, "n": min(v.params["n"] for v in each)})
    if identical:
        if temperature:
            return Verdict(True, "verdict_shared_noise_all", {**each[0].params, "lanes": 1 + len(lanes)})
        return Verdict(True, "verdict_identical_all", {"n": len(plain.tokens), "lanes": 1 + len(lanes)})
    for v, lane in zip(each, lanes):
        if v.key == "verdict_diverged":
            name = f"{lane.rollback}, tree {lane.tree}" if lane.tree else lane.rollback
            return Verdict(False, "verdict_diverged_lane", {**v.params, "rollback": name})
    return Verdict(False, "verdict_prefix", {"n": min(v.params["n"] for v in each)})


def _piece_at(run, i):
    return repr(run.pieces[i]) if i < len(run.pieces) else "(end)"


def speedup(plain, spec):
    """Speculative tok/s ÷ plain tok/s (0 when plain has no speed yet)."""
    return spec.tok_s / plain.tok_s if plain.tok_s else 0.0


def spread(ratios):
    """(median, lowest, highest) of a lane's speed-ups over the races run."""
    return statistics.median(ratios), min(ratios), max(ratios)


def repeating(tokens, n=4, share=0.5):
    """Is the text looping? True when at least `share` of its n-grams of tokens already occurred earlier in
    it (a greedy small model's "and the LORD, and the LORD…"): drafts are easy there, so tokens per pass
    is high for a reason that says little about other text."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    seen, again = set(), 0
    for g in grams:
        again += g in seen
        seen.add(g)
    return len(grams) >= 8 and again >= share * len(grams)


def summary(model_key, plain, lanes, settings=None, notices=(), *, lane_costs=None, speedups=None, skipped=""):
    """The race as JSON-ready data (the API's last output). Each speculative lane (a list, as RaceUpdate.lanes)
    under its lane_key ("speculative", then "select" or "tree"), with "speedup", the median over every race run
    (speedups: per lane, as RaceUpdate.speedups; None: the shown race alone), "speedup_range", "races" and
    "speedup_shown" (the race the page showed); the first lane's also at the top level. "identical" covers
    every lane. "costs": a lane's cost terms (lane_costs: qwen.costs.Costs per lane, or None) and each ÷ one
    plain token; "predicted_speedup": what they predict for the lane's tokens, rounds and rollbacks
    (costs.lane_prediction); "races_skipped": "busy" where the unseen repeats gave way to visitors waiting."""
    speedups = speedups or [[speedup(plain, lane)] for lane in lanes]
    lane_costs = list(lane_costs or []) + [None] * (len(lanes) - len(lane_costs or []))

    def speeds(ratios, run):
        middle, lo, hi = spread(ratios)
        return {"speedup": round(middle, 3), "speedup_range": [round(lo, 3), round(hi, 3)], "races": len(ratios),
                "speedup_shown": round(speedup(plain, run), 3)}

    def common(run):
        return {"text": run.text, "tokens": len(run.tokens), "seconds": round(run.seconds, 4),
                "tok_s": round(run.tok_s, 2), "ended": run.ended, "ids": list(run.tokens)}

    def speculative(run):
        return {**common(run), "rounds": run.rounds, "hits": run.hits, "acceptance": round(run.acceptance, 4),
                "k": run.k, "rollback": run.rollback, "tokens_per_round": round(run.per_round, 3),
                "rolled_back": run.rolled_back, "origins": list(run.origins),
                **({"tree": run.tree} if run.tree else {}),
                **({"k": "auto", "max_k": run.k, "kept": {str(m): n for m, n in sorted(run.kept.items())}}
                   if run.kept is not None else {})}

    def measured_part(run, m):
        if m is None:
            return {}
        return {"costs": {**m.as_dict(), **{f"{key}_per_token": round(v, 3) for key, v in
                                            m.ratios(run.rolled_back_share, run.per_round).items()}},
                "predicted_speedup": round(costs.lane_prediction(m, run), 3)}

    out = {"model": model_key, "plain": common(plain),
           "identical": all(lane.tokens == plain.tokens for lane in lanes), "repeating": repeating(plain.tokens)}
    for i, (lane, ratios, measured) in enumerate(zip(lanes, speedups, lane_costs)):
        part = {**speeds(ratios, lane), **measured_part(lane, measured)}
        out[lane_key(lane, i)] = {**speculative(lane), **(part if i else {})}
        if i == 0:
            out.update(part)
    if settings is not None:
        out["rollback"] = settings.rollback
        out["temperature"], out["seed"] = settings.temperature, settings.seed
        out["rule"] = settings.rule if settings.temperature else "greedy"
        out["tree_shape"] = settings.tree
        out["max_new_tokens"], out["raw"], out["thinking"] = settings.max_new_tokens, settings.raw, settings.thinking
    out["races_skipped"] = skipped
    out["notices"] = list(notices)
    return out
