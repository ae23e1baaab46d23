"""warm_up: compile every pass decoding will make now, check each against eager, keep it only where faster.

    report = warm_up(model, head, ks=(2,))      # compiles (or loads from disk), checks, times, keeps
    fast, fast_head = report["model"], report["head"]    # compiled views (view.py): decode with these

A compiled pass that computes something else than its eager twin turns everything eager, with the
reason in `status`; a pass not faster than eager runs eagerly from then on. Until a pass is ready, every
other thread runs it eagerly, so the app may serve with the views meanwhile (docs/design.md, "Trusting
a compiled pass"; "Compiling a first start sooner").
"""
import logging
import threading
import time

import torch

from qwen.cache import AttentionState, State, keep_step_states, restore_state, snapshot_state
from qwen.compiled import workers
from qwen.compiled.workers import SAMPLED, run_pass, warm_up_ids
from qwen.compiled.host import cache_dir, cpp_compiler, is_wide, release_freed_memory
from qwen.compiled.internals import record_isa_probes
from qwen.compiled.steps import Phase, Status, Why, compile_head, compile_model, compile_round
from qwen.compiled.view import CompiledHead, CompiledModel
from qwen.mtp import generate_mtp
from qwen.sample import generate

log = logging.getLogger("qwen.compile")


def _time_both(a, b, repeats=15):
    """Median seconds of a() and of b(), run alternately so that a busy moment of the machine (these
    hosts are noisy) falls on both. -> (seconds of a, seconds of b)"""
    times = ([], [])
    for _ in range(repeats):
        for fn, out in zip((a, b), times):
            t = time.perf_counter()
            fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            out.append(time.perf_counter() - t)
    return tuple(sorted(ts)[len(ts) // 2] for ts in times)


@torch.inference_mode()
def warm_up(model, head=None, ks=(2,), rollbacks=("select",), context=32, keep_if_faster=True, freeze=None,
            only_greedy=False, on_ready=None, timer=None, ahead=False):
    """Compile every pass decoding with these k and rollbacks makes, now (later runs load from the disk
    cache), check each against eager, time it against eager, and keep it only where it is faster.
    A small model (not host.is_wide) with `select` also gets each round as one graph, greedy and
    sampled; these and the decode step come first, the step graphs for the trace, top-k / top-p and
    `recompute` after (only_greedy: the greedy ones alone; the rest then runs eagerly).
    model and head: modules, or the compiled views compile_model / compile_head made of them.
    on_ready(model view, head view): called once the first passes are ready (the app starts serving
    with the views then). timer(model, head, ids, passes) -> {pass: eager seconds / compiled seconds}:
    how passes are timed (default time_passes; a test gives its own figures). ahead: graphs built ahead
    of time (ahead.py), as on ZeroGPU.
    -> {"model", "head" (the compiled views: decode with these), "status" (a Status: its phase, and why
    where eager), "seconds" (compiling), "ready_seconds" (until the first passes served), "speedups"
    {pass: eager / compiled}, "step_speedup" (the decode step's, or None)}."""
    if not isinstance(model, CompiledModel):
        model = compile_model(model, ks, rollbacks, freeze, ahead)
    if head is not None and not isinstance(head, CompiledHead):
        head = compile_head(head, ks, freeze, model, ahead)
    if head is not None and head.rounds is None and "select" in rollbacks \
            and not is_wide(model) and not ahead:
        compile_round(model, head, ks, freeze)
        compile_round(model, head, ks, freeze, sampled=True)
    steps = [model.steps] + ([head.steps, head.rounds, head.sampled_rounds] if head is not None else [])
    steps = [part for part in steps if part is not None]
    report = {"model": model, "head": head, "status": model.steps.status, "seconds": 0.0, "ready_seconds": None,
              "speedups": {}, "step_speedup": None}
    if not model.steps.enabled:
        return report
    for compiled in steps:
        compiled.status, compiled.warming_thread = Status(Phase.COMPILING), threading.get_ident()
    t0 = time.perf_counter()
    try:
        phases, skipped = warm_up_phases(model, head, next(iter(ks), None)), []
        if only_greedy:                         # the first phase's greedy passes only
            greedy = [p for p in phases[0] if p[0].kind != "sampled_round"]
            skipped = [p for phase in phases for p in phase if p not in greedy]
            phases = [greedy]
        for i, passes in enumerate(phases):
            later = phases[i + 1] if i + 1 < len(phases) else []
            if not _warm_up(model, head, steps, passes, report, context, keep_if_faster, later, timer or time_passes):
                break
            if report["ready_seconds"] is None:
                report["ready_seconds"] = time.perf_counter() - t0
                if on_ready is not None:
                    on_ready(model, head)
    finally:
        for compiled in steps:
            compiled.warming_thread = None
    # a skipped pass stays eager rather than compile on first use, mid-generation (a 3-token prompt
    # prefilling the head with k = 2 did)
    for part, variant in skipped:
        if part.enabled and variant not in part.ready:
            part.drop(variant, Why.NOT_WARMED)
    report["status"] = model.steps.status
    if report["status"].phase is Phase.COMPILED and model.embed_tokens.weight.device.type == "cpu":
        try:
            record_isa_probes(cache_dir(), cpp_compiler())
        except OSError:                             # a read-only cache: the probes simply run again
            pass
    release_freed_memory()
    log.info("warm-up: %s in %.1f s, eager / compiled: %s", report["status"], report["seconds"],
             ", ".join(f"{name} {x:.2f}x" for name, x in report["speedups"].items()))
    return report


def warm_up_phases(model, head, k_first):
    """The passes to warm up, in phases, as lists of (CompiledSteps, (T, keep)): with round graphs, the
    decode step and the rounds of k_first (greedy, then sampled) first; the other k's rounds, then the step
    graphs they stand in for, after."""
    passes = [(model.steps, v) for v in sorted(model.steps.variants)]
    passes += [(head.steps, v) for v in sorted(head.steps.variants)] if head is not None else []
    rounds = [part for part in (head.rounds, head.sampled_rounds) if part is not None and part.enabled] \
        if head is not None else []
    if not rounds or rounds[0] is not head.rounds:
        return [passes]
    first = [(model.steps, v) for v in sorted(model.steps.variants) if v == (1, False)]
    first += [(part, v) for part in rounds for v in sorted(part.variants) if k_first is None or v[0] == k_first + 1]
    more = [(part, v) for part in rounds for v in sorted(part.variants) if (part, v) not in first]
    return [first, more + [p for p in passes if p not in first]]


def _warm_up(model, head, steps, passes, report, context, keep_if_faster, later, timer):
    """Compile these passes (the graphs missing on disk in parallel: workers.py; meanwhile this process
    compiles its share and the first missing one of `later`, the next phase), check and time each
    against eager, keep the faster ones and make them ready for every thread. -> False when compiling
    failed or a pass computed something else (then everything is eager, the reason in the status)."""
    ids = warm_up_ids(model, context)                                                  # (1, context)
    t0 = time.perf_counter()
    helpers = workers.start(model, head, passes, context)
    try:
        # the passes no helper compiles first (compiled here meanwhile), then the helpers' (loaded)
        ours = [p for p in passes if p not in helpers.handed_off]
        ahead = workers.missing(later)[:1] if helpers.handed_off else []
        for part, variant in ours + ahead:
            run_pass(model, head, part, variant, ids)
        helpers.wait()
        for part, variant in helpers.handed_off:
            run_pass(model, head, part, variant, ids)
    except Exception as e:                      # a compiler that fails here would fail for the user: go eager
        log.warning("compiling failed; every pass runs eagerly", exc_info=True)     # the whole traceback, for a report
        helpers.wait()
        first_line = (str(e).splitlines() or [""])[0][:200]
        for compiled in steps:
            compiled.disable(Why.FAILED, f"{type(e).__name__}: {first_line}")
        report["seconds"] += time.perf_counter() - t0
        return False
    report["seconds"] += time.perf_counter() - t0
    wrong = _disagreement(model, head, ids, passes)
    if wrong:                                   # a miscompiled step must never reach a user
        for compiled in steps:
            compiled.disable(Why.WRONG, f"the {wrong} disagrees with eager")
        return False
    for kind in ("round", "sampled_round"):
        rounds = [(part, v) for part, v in passes if part.kind == kind]
        wrong = _round_disagreement(model, head, ids[:, :8], rounds)
        if wrong:                               # rounds then run step by step, through the checked steps
            rounds[0][0].disable(Why.WRONG, f"the {wrong} disagrees with plain decoding")
    speedups = timer(model, head, ids, [(part, v) for part, v in passes if part.enabled])
    report["speedups"].update({pass_name(part, v): x for (part, v), x in speedups.items()})
    if (model.steps, (1, False)) in speedups:
        report["step_speedup"] = speedups[(model.steps, (1, False))]
    for (part, variant), speedup in speedups.items():
        if keep_if_faster and speedup <= 1:
            part.drop(variant, Why.SLOWER, f"{speedup:.2f}x")
        else:
            part.ready.add(variant)
    for part in steps:
        if part.enabled and part.ready:
            part.status = Status(Phase.COMPILED)
    return True


def pass_name(part, variant):
    """(T, keep) of a model's or head's CompiledSteps in words: "decode step", "verify of 3 tokens"..."""
    T, keep = variant
    if part.kind == "head":
        return f"head pass of {T} token{'s' if T > 1 else ''}"
    if part.kind in ("round", "sampled_round"):
        return f"{'greedy' if part.kind == 'round' else 'sampled'} round with k={T - 1}"
    return "decode step" if T == 1 else f"verify of {T} tokens{' (keeping step states)' if keep else ''}"


def time_passes(model, head, ids, passes):
    """Each of these compiled passes against its eager twin, on the same inputs at the same position
    (a round: greedy decoding of a few tokens, its eager twin the same round uncompiled).
    -> {(CompiledSteps, (T, keep)): eager seconds / compiled seconds}"""
    context, speedups = ids.shape[1], {}
    state = State(model)
    hidden = model.eager.hidden(ids, state)                                            # (1, context, H)
    emb, cache = model.embed_tokens(ids), AttentionState()
    if head is not None:
        head.eager(emb, hidden, 0, cache)

    def run(part, T, keep, compiled):           # through the views, or their eager modules
        m, h = (model, head) if compiled else (model.eager, head and head.eager)
        if part.kind == "model":
            state.pos = context
            keep_step_states(state, T, on=keep)
            m.forward(ids[:, :T], state)
        elif part.kind == "head":               # a guess as decoding makes it: the head pass and its scores
            cache.truncate(context)
            h.draft(m, hidden[:, :T], ids[:, :T], context, cache)
        else:                                   # eager twin: the same greedy_round, uncompiled
            generate_mtp(m, h, ids[:, :8], max_new_tokens=2 * T, k=T - 1,
                         **(SAMPLED if part.kind == "sampled_round" else {}))
    try:
        for part, (T, keep) in passes:
            eager, compiled = _time_both(lambda: run(part, T, keep, False), lambda: run(part, T, keep, True))
            speedups[(part, (T, keep))] = eager / compiled
    finally:
        keep_step_states(state, on=False)
    return speedups


def _disagreement(model, head, ids, passes):
    """Run each of these compiled passes (of the model and the head) and its eager twin on the same
    inputs and state; -> which differs by more than rounding ("verify of 3 tokens (max |logit
    difference| 4.1)"), or None."""
    context = ids.shape[1]
    tolerance = 1e-3 if model.embed_tokens.weight.dtype == torch.float32 else 5e-2    # relative to max |logit|

    def differs(a, b):
        a, b = a.float(), b.float()
        gap = (a - b).abs().max()
        return gap if not gap <= tolerance * a.abs().max() + 1e-4 else None       # NaN counts as different

    state = State(model)
    hidden = model.eager.hidden(ids, state)                                            # (1, context, H)
    snap = snapshot_state(state)
    for T, keep in [v for part, v in passes if part.kind == "model"]:
        outs = []
        for m in (model.eager, model):
            restore_state(state, snap)
            keep_step_states(state, T, on=keep)
            outs.append(m.forward(ids[:, :T], state))                                 # (1, T, V)
        keep_step_states(state, T, on=False)
        gap = differs(*outs)
        if gap is not None:
            return f"{'decode step' if T == 1 else f'verify of {T} tokens'} (max |logit difference| {float(gap):.3g})"
    emb = model.embed_tokens(ids)
    for T, _ in [v for part, v in passes if part.kind == "head"]:
        cache, outs = AttentionState(), []
        head.eager(emb, hidden, 0, cache)                                              # eager (T = context)
        for h in (head.eager, head):
            cache.truncate(context)
            outs.append(h.scored_pass(emb[:, :T], hidden[:, :T], context, cache))        # (1, T, H), scores
        gap = differs(outs[0][0], outs[1][0])
        if gap is None and outs[1][1] is not None:          # the graph scored the draft: against eager scores
            gap = differs(head.draft_logits(outs[0][0], model.lm_head)[0], outs[1][1])
        if gap is not None:
            return f"draft head pass of {T} tokens (max |difference| {float(gap):.3g})"
    return None


def _round_disagreement(model, head, prompt, rounds):
    """The first round of decoding (greedy, or sampled: SAMPLED) through each of these compiled round
    graphs against plain decoding; -> which round gives other tokens, or None. Only the first round: in
    bfloat16 a later near-tie may be decided either way; a miscompiled graph is wrong at once."""
    for part, (T, _) in rounds:
        sampling = SAMPLED if part.kind == "sampled_round" else {}
        want = generate(model, prompt, max_new_tokens=T + 1, **sampling)
        got = generate_mtp(model, head, prompt, max_new_tokens=T + 1, k=T - 1, **sampling)[0]
        if got != want:
            return f"{pass_name(part, (T, True))} (tokens {got[:8]}… instead of {want[:8]}…)"
    return None
