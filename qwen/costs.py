"""What a plain token and a speculative round cost on this host, term by term, and the speed-up they predict.

    costs = from_lanes(plain, plain_passes, spec, spec_phases, k=2, rollback="select")   # lanes timed as run
    costs.plain_token()                  -> step + plain_around      one plain token
    costs.round_seconds(0.3, 2.4)        -> passes + round_around + per_token x 2.4    one round yielding 2.4 tokens
    predict(costs, 2.4, 0.3)             -> 2.4 x plain_token ÷ round_seconds    (the steady state)
    predict(costs, 2.4, 0.3, tokens=120, rounds=50)   -> whole lanes, each prompt's pass included

The model has every term a lane's clock counts:

    a plain token = its model pass (step) + the work around it (plain_around: picking the token, the loop)
    a round       = its model passes (the head's, the verify's, the rollback's: `passes`)
                    + the work around the round (round_around: accepting, bookkeeping, the loop)
                    + per_token for each token it emits
    a lane        = its prompt's pass (prefill; the speculative lane's also runs the head once) + the above

Each term is measured on its own, in lanes run for it, never fitted to the run it then predicts: the model's
passes are timed inside the engine (the `timings=` of qwen.sample.generate_stream and
qwen.mtp.generate_mtp_stream), the work around them is a lane's time between tokens or rounds less those
passes, per_token is the slope of that work against the tokens a round emitted. A lane is a LaneTimes: `passes`
[(start s, end s, new tokens)] per item (the prompt's first) and `origins` per token ("main", "draft", "correction",
"bonus"), timed by one clock (timed_items), the demo's race lanes included. Costs saved by older versions
have only the passes (the around terms 0): they predict as before.

One timer and one table: `measure` runs lanes (the race's, or the engine's own: qwen.mtp.engine_race) and
turns them into Costs; TABLE keeps them per model, head, host, sampling kind, rollback and the lanes timed, one
per round shape, for everything that predicts (the page's verdict and what-if, k="auto"'s round lengths, the benches).
"""
import statistics
import time
import weakref
from dataclasses import asdict, dataclass, field

import torch

@dataclass
class Costs:
    """Seconds on this host. step: the main model's pass over one token. A round's passes, step by step:
    draft (the head's passes drafting d2..dk), verify (one pass over k+1 tokens, or a tree's rows), snapshot; back /
    keep: restore + re-run in a round that rolled back / that did not; catch_up: the head's pass over the round's
    kept tokens and its guess of the next d1 (costs saved before it existed counted it in draft). whole: a round run as one call (greedy or
    shared-noise `select`: qwen.mtp.greedy_round; with k="auto" the mean round's passes, one-call rounds and plain
    steps alike), 0 where rounds run step by step; when set, it is the round's passes and the others only take
    them apart. The work around: plain_around per plain token,
    round_around per round, per_token per token a round emits. prefill / prefill_spec: the prompt's pass
    in each lane (the speculative one also guesses once), for the prompt measure_prefill timed."""
    k: int
    rollback: str
    step: float
    draft: float = 0.0
    verify: float = 0.0
    snapshot: float = 0.0
    back: float = 0.0
    keep: float = 0.0
    catch_up: float = 0.0
    whole: float = 0.0
    plain_around: float = 0.0
    round_around: float = 0.0
    per_token: float = 0.0
    prefill: float = 0.0
    prefill_spec: float = 0.0
    tree: str = ""
    samples: dict = field(default_factory=dict)     # how many tokens, rounds and lane runs the medians span

    def plain_token(self):
        """Seconds of one plain token: its pass and the work around it."""
        return self.step + self.plain_around

    def passes(self, rolled_back=0.0):
        """Mean seconds of a round's model passes when a share `rolled_back` of rounds reject a draft."""
        if self.whole:
            return self.whole
        return self.draft + self.verify + self.snapshot + rolled_back * self.back + (1 - rolled_back) * self.keep \
            + self.catch_up

    def round_seconds(self, rolled_back=0.0, tokens_per_round=0.0):
        """Mean seconds of a round that yields `tokens_per_round` tokens: its passes and the work around them."""
        return self.passes(rolled_back) + self.round_around + self.per_token * tokens_per_round

    def ratios(self, rolled_back=0.0, tokens_per_round=0.0):
        """Each cost ÷ one plain token: verify, draft (per head pass), draft_round (all of them), rollback,
        passes (the round's model passes), around (the work around a round, its tokens' included), round."""
        unit = max(self.plain_token(), 1e-12)
        around = self.round_around + self.per_token * tokens_per_round
        head = self.draft + self.catch_up                       # a chain's k head passes: k - 1 drafts, the catch-up
        return {"verify": self.verify / unit, "draft": head / max(self.k, 1) / unit,
                "draft_round": head / unit,
                "rollback": (self.snapshot + rolled_back * self.back + (1 - rolled_back) * self.keep) / unit,
                "passes": self.passes(rolled_back) / unit, "around": around / unit,
                "round": self.round_seconds(rolled_back, tokens_per_round) / unit}

    def where_time_goes(self, rolled_back=0.0, tokens_per_round=1.0):
        """Seconds per token in each lane, split: {"plain": (pass, around), "spec": (passes, around)}, the
        speculative lane's round divided by the tokens it yields."""
        m = max(tokens_per_round, 1e-12)
        return {"plain": (self.step, self.plain_around),
                "spec": (self.passes(rolled_back) / m, (self.round_around + self.per_token * m) / m)}

    def assuming_flat_verify(self):
        """The same costs where a pass over k+1 tokens costs one step (a GPU, or a model whose weights outrun
        the cache, where a pass is paid for reading the weights, not per row): an assumption, not a measurement.
        A round run as one call is scaled by the share its verify has step by step."""
        flat = Costs(**{**asdict(self), "samples": dict(self.samples)})
        flat.verify = self.step
        parts = self.draft + self.verify + self.snapshot + self.keep + self.catch_up   # the round taken apart
        if self.whole and parts > 0:
            flat.whole = self.whole * (parts - self.verify + self.step) / parts
        return flat

    def as_dict(self):
        return {key: (round(v, 7) if isinstance(v, float) else v) for key, v in asdict(self).items()}

    def terms(self):
        """k, rollback and every term in seconds, as a dict (what a trace file keeps: no tree, no sample counts)."""
        return {key: v for key, v in self.as_dict().items() if key not in ("tree", "samples")}


def predict(costs, tokens_per_round, rolled_back=0.0, tokens=None, rounds=None):
    """Speed-up over plain decoding that these costs predict for rounds yielding `tokens_per_round` tokens,
    a share `rolled_back` of which rejected a draft. With `tokens` (the lanes' tokens) and `rounds`, the
    whole lanes, each with its prompt's pass: (prefill + (tokens − 1) plain tokens) ÷ (prefill_spec +
    rounds rounds); without, the steady state: tokens_per_round plain tokens ÷ one round."""
    if tokens and rounds:
        plain = costs.prefill + (tokens - 1) * costs.plain_token()
        spec = costs.prefill_spec + rounds * costs.round_seconds(rolled_back, tokens_per_round)
        return plain / max(spec, 1e-12)
    return tokens_per_round * costs.plain_token() / max(costs.round_seconds(rolled_back, tokens_per_round), 1e-12)


# --- what the terms predict at an acceptance rate (the stepper's what-if) ------------------------------------

def lane_prediction(costs, run):
    """The speed-up `costs` predict for a finished speculative lane (a demo.race.Run: its tokens, rounds and
    rolled-back rounds), its prompt's pass included (predict)."""
    return predict(costs, run.per_round, run.rolled_back_share, len(run.tokens), run.rounds)


def tokens_per_round(a, k):
    """Expected tokens a round yields with k guesses each accepted with probability a (independently):
    1 + a + a^2 + ... + a^k = (1 − a^(k+1)) / (1 − a)."""
    return k + 1.0 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def speedup_at(a, k, costs, tokens=None):
    """Predicted speed-up over plain decoding at acceptance a, by the race's cost model (predict): the tokens a
    round yields at a, the share of rounds that roll back being 1 − a^k; for a run of `tokens` tokens (each
    lane's prompt pass included, as the race predicts), else the steady state."""
    m = tokens_per_round(a, k)
    return predict(costs, m, 1 - a ** k, tokens=tokens, rounds=(tokens - 1) / m if tokens else None)


def break_even(k, costs, steps=1000, tokens=None):
    """Smallest acceptance rate at which speculative decoding is no slower than plain; None if never."""
    for i in range(steps + 1):
        if speedup_at(i / steps, k, costs, tokens) >= 1.0:
            return i / steps
    return None


# --- one main-model pass, timed on its own (the benches and the measuring tools) ---------------------------

@dataclass(frozen=True)
class Pass:
    """A main-model pass as a round's verify runs it: `rows` tokens after the prompt; keep: keeping each row's
    step states (select's verify: no memory written); tree: a draft tree over the rows (qwen.tree.Tree, run
    through forward_hidden); select: then apply the first `select` rows' writes (select_step_states), timed
    with the pass. Pass(1) is one plain decoding step."""
    rows: int
    keep: bool = False
    tree: object = None
    select: int = None


def time_pass(model, passes, repeats=5, warmup=1, prompt=64, state=None):
    """Median seconds of each main-model pass in `passes` ({name: Pass}, or an iterable of Pass: the names are
    then the passes), each run at position `prompt` of one state holding a prompt (random ids, made here unless
    `state` already holds `prompt` tokens). The passes take turns, `warmup` turns untimed and then `repeats`
    timed, so a slow moment of a shared host falls on all of them; the state's KV length and step-state slots
    are put back after each pass (its DeltaNet memory is not: the times do not depend on it). A GPU is
    synchronised around each pass. -> {name: seconds} (0 where repeats is 0)"""
    from qwen.cache import State, keep_step_states, select_step_states, truncate_kv
    named = passes if isinstance(passes, dict) else {p: p for p in passes}
    with torch.inference_mode():
        if state is None:
            state = State(model, 2 * prompt)
            ids = torch.randint(0, min(1000, state.cfg.vocab_size), (1, prompt),
                                generator=torch.Generator().manual_seed(1)).to(state.device)
            model(ids, state, last_only=True)
        gpu = state.device.type == "cuda"
        rows = torch.arange(1, max(p.rows for p in named.values()) + 1, device=state.device)[None] \
            % state.cfg.vocab_size

        def one(p):
            state.pos = prompt
            truncate_kv(state, prompt)
            keep_step_states(state, p.rows, on=p.keep)
            if gpu:
                torch.cuda.synchronize()
            t = time.perf_counter()
            if p.tree is not None:
                model.forward_hidden(rows[:, :p.rows], state, tree=p.tree)
            else:
                model(rows[:, :p.rows], state)
            if p.select is not None:
                select_step_states(state, prompt, p.select)
            if gpu:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t
            keep_step_states(state, p.rows, on=False)
            return seconds
        times = {name: [] for name in named}
        for turn in range(warmup + repeats):
            for name, p in named.items():
                seconds = one(p)
                if turn >= warmup:
                    times[name].append(seconds)
    return {name: _median(ts) for name, ts in times.items()}


# --- the terms, from lanes timed as the race runs them ------------------------------------------------------

def _median(xs, default=0.0):
    xs = list(xs)
    return statistics.median(xs) if xs else default


def _intervals(run):
    """A lane's engine seconds per item after the prompt's (a token, or a round), and the tokens of each."""
    return [(end - start, n) for start, end, n in run.passes[1:]]


def per_token_slope(residuals):
    """Seconds per emitted token of a round's work around its passes: [(seconds, tokens)] -> (intercept,
    slope), from the medians of rounds grouped by how many tokens they emitted (least squares over the
    groups, weighted by their sizes; a slope below 0 reads as 0: noise)."""
    groups = {}
    for seconds, n in residuals:
        groups.setdefault(n, []).append(seconds)
    points = [(n, statistics.median(xs), len(xs)) for n, xs in groups.items()]
    weight = sum(w for _, _, w in points)
    if len(points) < 2 or not weight:
        return _median(s for s, _ in residuals), 0.0
    mean_n = sum(n * w for n, _, w in points) / weight
    mean_s = sum(s * w for _, s, w in points) / weight
    spread = sum(w * (n - mean_n) ** 2 for n, _, w in points)
    slope = max(0.0, sum(w * (n - mean_n) * (s - mean_s) for n, s, w in points) / spread) if spread else 0.0
    return _median(s - slope * n for s, n in residuals), slope


def from_lanes(plain_runs, plain_passes, spec_runs, spec_phases, k, rollback, tree=""):
    """The terms from lanes run for them: plain_runs / spec_runs, finished lanes such as LaneTimes (their
    `passes`: the lane's engine seconds per item); plain_passes, per plain run the model passes' seconds
    (qwen.sample.generate_stream's timings, the prompt's first); spec_phases, per speculative run its
    per-round seconds by phase (qwen.mtp.generate_mtp_stream's timings, the prefill's first). Each term is
    a mean over a run's tokens or rounds (a lane's time is their sum, slow ones included), then the median
    over the runs. -> Costs"""
    each = [_terms_of_one(*lanes) for lanes in zip(plain_runs, plain_passes, spec_runs, spec_phases)]
    each = [e for e in each if e is not None]
    pick = lambda key: _median(e[key] for e in each)        # noqa: E731
    residuals = [r for e in each for r in e["residuals"]]
    _, slope = per_token_slope(residuals)
    return Costs(k=k, rollback=rollback, step=pick("step"), draft=pick("draft"), verify=pick("verify"),
                 snapshot=pick("snapshot"), back=pick("back"), keep=pick("keep"), catch_up=pick("catch_up"),
                 whole=pick("fused"),
                 plain_around=max(0.0, pick("plain_around")),
                 round_around=max(0.0, _median(e["round_around"] - slope * e["per_round"] for e in each)),
                 per_token=slope, tree=tree,
                 samples={"tokens": sum(e["tokens"] for e in each), "rounds": sum(e["rounds"] for e in each),
                          "runs": len(each)})


def _terms_of_one(plain_run, plain_passes, spec_run, spec_phases):
    """One calibration run's means: {step, plain_around, draft, verify, snapshot, fused, keep, back,
    round_around (its tokens' work included), per_round, residuals [(seconds around, tokens)], ...}."""
    plain = [(seconds, p) for (seconds, _), p in zip(_intervals(plain_run), plain_passes[1:])]
    rounds = list(zip(_intervals(spec_run), _round_origins(spec_run), spec_phases[1:]))
    if not plain or not rounds:
        return None
    mean = statistics.fmean
    undo = lambda p: p.get("restore", 0.0) + p.get("rerun", 0.0)           # noqa: E731
    back = [undo(p) for _, origins, p in rounds if "correction" in origins]
    keep = [undo(p) for _, origins, p in rounds if "correction" not in origins]
    residuals = [(seconds - sum(p.values()), n) for (seconds, n), _, p in rounds]
    # a lane with rounds run as one call: its passes are the mean round's, whichever way each ran (k="auto" mixes
    # one-call rounds with plain steps)
    fused = mean(sum(p.values()) for _, _, p in rounds) if any(p.get("fused") for _, _, p in rounds) else 0.0
    return {"step": mean(p for _, p in plain), "plain_around": mean(s - p for s, p in plain), "fused": fused,
            **{key: mean(p.get(key, 0.0) for _, _, p in rounds) for key in ("draft", "verify", "snapshot", "catch_up")},
            "back": mean(back) if back else mean(keep), "keep": mean(keep) if keep else 0.0,
            "round_around": mean(s for s, _ in residuals), "per_round": mean(n for _, n in residuals),
            "residuals": residuals, "tokens": len(plain), "rounds": len(rounds)}


def from_records(records, k, rollback, step):
    """Costs from a trace's round records alone (a trace saved without the race's terms): the passes, as
    medians over its rounds (the first left out as a warm-up where there are more), the plain step given;
    the work around them unknown (0), so these predict from the passes alone."""
    rounds = [r for r in records if r.get("kind") == "round"]
    rounds = rounds[1:] if len(rounds) > 1 else rounds
    med = lambda key, rows: _median(r["seconds"].get(key, 0.0) for r in rows)       # noqa: E731
    undo = lambda rows: _median(r["seconds"].get("restore", 0.0) + r["seconds"].get("rerun", 0.0)  # noqa: E731
                                for r in rows)
    back = [r for r in rounds if r["rolled_back"]]
    keep = [r for r in rounds if not r["rolled_back"]]
    return Costs(k, rollback, step, med("draft", rounds), med("verify", rounds) if rounds else step,
                 med("snapshot", rounds), undo(back) if back else undo(keep), undo(keep), med("catch_up", rounds))


def take_apart(costs, records):
    """Costs whose round runs as one call (whole), with its parts from a trace of rounds run step by step
    (qwen.trace records' `seconds`; the first round left out as a warm-up): draft, verify, snapshot, keep,
    back. The whole call stays the round's cost; the parts only say what it is made of."""
    rounds = [r for r in records if r.get("kind") == "round"]
    rounds = rounds[1:] if len(rounds) > 1 else rounds
    if not rounds:
        return costs
    med = lambda key: _median(r["seconds"].get(key, 0.0) for r in rounds)      # noqa: E731
    undo = [r["seconds"].get("restore", 0.0) + r["seconds"].get("rerun", 0.0) for r in rounds]
    costs.draft, costs.verify, costs.snapshot, costs.keep = med("draft"), med("verify"), med("snapshot"), _median(undo)
    costs.catch_up = med("catch_up")
    costs.back = costs.keep
    return costs


def _round_origins(run):
    """Per round of a finished speculative Run, the origins of the tokens it emitted."""
    out, i = [], 1                                      # the prefill's token first
    for _, _, n in run.passes[1:]:
        out.append(run.origins[i:i + n])
        i += n
    return out


def prefill_seconds(stream_factories, repeats=5, cap=0.25):
    """Median seconds from starting a fresh generator to its first item (the prompt's pass), for each of
    `stream_factories` (functions -> a new generator), taking turns: [seconds per factory]. Fewer repeats
    where one round of them takes over `cap` seconds (a long prompt on a big model)."""
    times = [[] for _ in stream_factories]
    for _ in range(repeats):
        started = time.perf_counter()
        for factory, out in zip(stream_factories, times):
            stream = factory()
            t = time.perf_counter()
            try:
                next(stream)
            finally:
                stream.close()
            out.append(time.perf_counter() - t)
        if time.perf_counter() - started > cap:
            break
    return [statistics.median(out) for out in times]


@dataclass(kw_only=True)
class LaneTimes:
    """A timed lane: per item (the prompt's token, then each token or round) its start and end second of engine time
    and its new tokens, each token's origin, and its engine seconds so far. timed_lane fills one; a race's lane
    (demo.race.Run) is one, filled as it streams."""
    passes: list = field(default_factory=list)
    origins: list = field(default_factory=list)
    seconds: float = 0.0

    def took(self, seconds, new):
        """Count an item that took `seconds` of engine time and brought `new` tokens (its origins are the caller's)."""
        self.passes.append((self.seconds, self.seconds + seconds, new))
        self.seconds += seconds


def timed_items(stream, clock=time.perf_counter):
    """Each item of a decoding stream with the seconds the stream took to give it: yields (item, seconds), timing
    only the stream (the clock starts again when the caller asks for the next item, so whatever the caller does
    between items is not counted). The one lane clock: timed_lane's and the race's (demo.race)."""
    t = clock()
    for item in stream:
        yield item, clock() - t
        t = clock()


def timed_lane(stream, to_origins):
    """Run a decoding stream to its end, timing the caller's side of each item (timed_items). -> LaneTimes"""
    lane = LaneTimes()
    for item, seconds in timed_items(stream):
        origins = to_origins(item)
        lane.origins += origins
        lane.took(seconds, len(origins))
    return lane


def measure(race_once, lanes, races=3, budget=None, warmup=0):
    """The one timer behind every cost the project predicts from (the race's verdict, the stepper's what-if, k="auto",
    the benches). race_once() runs a plain lane and one lane per entry of `lanes` [(k, rollback, tree)] once, with
    the engine's timings on -> ([finished lanes, plain first: anything with `passes`, `origins` and `seconds`, as
    LaneTimes], [their engine timings]). It is called `warmup` times off the record, then up to `races` times, or
    until the lanes have spent `budget` seconds. -> [Costs per entry of `lanes`]: the terms (from_lanes), each
    lane's prompt pass (prefill, prefill_spec: medians), and in samples the share of rounds that rolled back and
    the tokens a round yielded (medians over the races)."""
    plains, plain_timings = [], []
    specs, spec_timings = [[] for _ in lanes], [[] for _ in lanes]
    spent = 0.0
    for turn in range(warmup + max(1, races)):
        finished, timings = race_once()
        if turn < warmup:
            continue
        plains.append(finished[0])
        plain_timings.append(timings[0])
        for j in range(len(lanes)):
            specs[j].append(finished[1 + j])
            spec_timings[j].append(timings[1 + j])
        spent += sum(lane.seconds for lane in finished)
        if budget is not None and spent >= budget:
            break
    out = []
    for (k, rollback, tree), runs, phases in zip(lanes, specs, spec_timings):
        c = from_lanes(plains, plain_timings, runs, phases, k, rollback, tree)
        c.prefill = _median(p[0] for p in plain_timings if p)
        c.prefill_spec = _median(lane.passes[0][1] - lane.passes[0][0] for lane in runs if lane.passes)
        rounds = [_round_origins(lane) for lane in runs]
        c.samples["rolled_back"] = _median(sum("correction" in o for o in r) / max(len(r), 1) for r in rounds)
        c.samples["per_round"] = _median(sum(map(len, r)) / max(len(r), 1) for r in rounds)
        out.append(c)
    return out


# --- one table: this host's measured costs, kept per model, head and settings ---------------------------------

def serving(module):
    """Which compiled graphs serve a module now (qwen.compiled's views say; an eager module: None)."""
    return module.serving() if hasattr(type(module), "serving") else None


def host(model):
    """The hardware a measurement holds for: the device, and on a CPU the instruction set PyTorch uses there."""
    device = model.embed_tokens.weight.device
    if device.type == "cpu":
        return f"cpu {torch.backends.cpu.get_cpu_capability()}"
    return str(device)


def sampling_kind(sampling=None):
    """How tokens are picked, as far as it changes what a round costs: "greedy" (however spelled), "shared"
    (shared noise, a seed), "rejection" (the textbook rule, a generator), with the filters (top_k, top_p)."""
    how = dict(sampling or {})
    if not how.get("temperature"):
        return ("greedy", None, None)
    kind = "rejection" if how.get("generator") is not None else "shared"
    return (kind, how.get("top_k"), how.get("top_p"))


class CostTable:
    """This host's measured costs, one cache for the whole project (TABLE). A row is a model and a head (these very
    modules, and the compiled graphs serving them now), the host (host()), how tokens are picked (sampling_kind),
    the rollback, and the lanes that were timed (`lanes`: "race", the page's race lanes taking turns, whose terms
    count the race's own work; "engine", the engine's bare streams); in it, one Costs per round shape: k = 1, 2, ...
    (a chain of k), 0 (a plain step in a k="auto" run, the head resting), "auto" (a k="auto" lane's mean round), or
    a tree's shape. Every Costs holds the plain step's terms beside its round's. Entries are filled by `measure`
    (through demo.race.calibrate, length_seconds and the benches) and read by the race's verdict, the stepper's
    what-if, k="auto" and the benches; the oldest go past `keep`. The prompt's own pass depends on the prompt, so it
    is kept per prompt beside them (with_prompt_pass)."""

    def __init__(self, keep=64):
        self.keep = keep
        self._costs = {}            # key -> (weak refs to the model and the head, Costs)
        self._prompts = {}          # (id of the Costs, the prompt's ids) -> (weak ref to the Costs, plain s, spec s)

    @staticmethod
    def key(model, mtp, k, rollback, sampling=None, tree="", lanes="engine"):
        shape = k if k == "auto" else int(k)
        return (id(model), id(mtp), serving(model), serving(mtp), host(model), sampling_kind(sampling), rollback,
                lanes, shape, tree or "")

    def get(self, model, mtp, k, rollback, sampling=None, tree="", lanes="engine"):
        """The kept Costs of this round shape, or None."""
        model_ref, mtp_ref, costs = self._costs.get(self.key(model, mtp, k, rollback, sampling, tree, lanes),
                                                    (None, None, None))
        return costs if model_ref is not None and model_ref() is model and mtp_ref() is mtp else None

    def put(self, model, mtp, k, rollback, costs, sampling=None, tree="", lanes="engine"):
        """Keep `costs` for this round shape (a measurement replaces the one before it). -> costs"""
        key = self.key(model, mtp, k, rollback, sampling, tree, lanes)
        self._costs[key] = (weakref.ref(model), weakref.ref(mtp), costs)
        while len(self._costs) > self.keep:
            self._costs.pop(next(iter(self._costs)))
        return costs

    def with_prompt_pass(self, costs, ids, streams):
        """A copy of `costs` with each lane's pass over this prompt (prefill, prefill_spec) timed by
        prefill_seconds(streams) [plain, speculative stream factories], once per prompt and kept Costs, so
        everything that predicts this prompt from these terms predicts from the same prompt pass."""
        key = (id(costs), tuple(ids[0].tolist()))
        ref, plain, spec = self._prompts.get(key, (None, 0.0, 0.0))
        if ref is None or ref() is not costs:
            plain, spec = prefill_seconds(streams)
            self._prompts[key] = (weakref.ref(costs), plain, spec)
            while len(self._prompts) > self.keep:
                self._prompts.pop(next(iter(self._prompts)))
        return Costs(**{**asdict(costs), "prefill": plain, "prefill_spec": spec, "samples": dict(costs.samples)})

    def forget(self):
        """Drop every kept measurement (the next reader measures again)."""
        self._costs.clear()
        self._prompts.clear()


TABLE = CostTable()


def length_seconds(model, mtp, max_k, race_for, sampling=None, rollback="select", tokens=32, races=5, budget=3.0):
    """Seconds of a round of each draft length 0..max_k on this host (0: a plain step with the head resting),
    what k="auto" chooses by: each a round's cost at the share of rollbacks and the tokens per round its lane
    saw (Costs.round_seconds), from TABLE's engine lanes; where one is missing, every length measured again
    together, so the lengths compare like with like (race_for(ids, max_new_tokens, lanes) -> a race_once for
    `measure`: qwen.mtp.engine_race), on a short counting prompt, the first race off the record, then up to `races`
    races within `budget` seconds (a big model: one). A length never reads cheaper than the one before it (a
    round of m drafts does all that one of m - 1 does, and more: one measured dearer was slowed by something
    else). -> tuple of max_k + 1 seconds"""
    lengths = list(range(max_k + 1))
    if any(TABLE.get(model, mtp, m, rollback, sampling) is None for m in lengths):
        room = model.cfg.max_position_embeddings - max_k - 1         # a round of max_k must fit after the tokens
        if room < 4:
            raise ValueError(f"a context of {model.cfg.max_position_embeddings} positions is too short to time a "
                             f"round of {max_k} drafts for k='auto'")
        length = min(16, room // 2)
        device = model.embed_tokens.weight.device
        ids = torch.arange(1, length + 1, device=device)[None] % model.cfg.vocab_size          # (1, length)
        lanes = [(m, rollback, "") for m in lengths]
        found = measure(race_for(ids, min(tokens, room - length), lanes), lanes, races, budget, warmup=1)
        for m, c in zip(lengths, found):
            TABLE.put(model, mtp, m, rollback, c, sampling)
    seconds = []
    for m in lengths:
        c = TABLE.get(model, mtp, m, rollback, sampling)
        s = c.round_seconds(c.samples.get("rolled_back", 0.0), c.samples.get("per_round", m + 1.0))
        seconds.append(max([s] + seconds))
    return tuple(seconds)
