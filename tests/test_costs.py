"""The cost model (qwen.costs): every term a lane's clock counts, measured on its own, and what the terms predict;
the engine's timings it measures with; how the race's verdict reports the terms and draws where the time goes."""
import dataclasses
import re

import pytest
import torch

from demo import race as race_module
from demo.models import ModelStore
from demo.prompts import prepare
from demo.race import Run, Verdict, race
from demo.race_html import speed_html, time_goes_html, verdict_html
from demo.validate import race_settings
from qwen import costs
from qwen.mtp import generate_mtp, generate_mtp_stream
from qwen.sample import generate, generate_stream


def calibrate(loaded, ids, settings, **kw):
    """demo.race.calibrate as the race calls it: the engine its lanes decode with, the loaded model's context."""
    return race_module.calibrate(*race_module.engine_for(loaded, settings), ids, settings, context=loaded.context,
                                 **kw)


# --- the arithmetic, against hand-worked numbers ---

def test_a_plain_token_and_a_round_add_up_their_terms():
    # a plain token: 1.0 ms pass + 0.25 ms around = 1.25 ms
    # a round: 2.0 ms passes + 0.05 ms around + 0.01 ms x 2.5 tokens = 2.075 ms; 2.5 tokens x 1.25 / 2.075
    c = costs.Costs(k=2, rollback="select", step=1.0e-3, whole=2.0e-3, plain_around=0.25e-3, round_around=0.05e-3,
                    per_token=0.01e-3)
    assert c.plain_token() == pytest.approx(1.25e-3)
    assert c.round_seconds(0.3, 2.5) == pytest.approx(2.075e-3)
    assert costs.predict(c, 2.5, 0.3) == pytest.approx(2.5 * 1.25 / 2.075)
    r = c.ratios(0.3, 2.5)
    assert r["round"] == pytest.approx(2.075 / 1.25) and r["passes"] == pytest.approx(2.0 / 1.25)
    assert r["around"] == pytest.approx(0.075 / 1.25)


def test_counting_only_the_passes_would_mispredict_where_a_plain_token_has_work_around_it():
    # the page's old model: 2.5 tokens over a round of 2.0 steps = 1.25x; with 0.25 ms around every plain token
    # and 0.05 ms around every round, the same rounds are worth 1.52x
    passes_only = costs.Costs(k=2, rollback="select", step=1.0e-3, whole=2.0e-3)
    every_term = costs.Costs(k=2, rollback="select", step=1.0e-3, whole=2.0e-3, plain_around=0.25e-3,
                             round_around=0.05e-3)
    assert costs.predict(passes_only, 2.5) == pytest.approx(1.25)
    assert costs.predict(every_term, 2.5) == pytest.approx(2.5 * 1.25 / 2.05)


def test_recompute_pays_its_rollbacks_only_in_rounds_that_reject():
    c = costs.Costs(k=1, rollback="recompute", step=0.01, draft=0.0, verify=0.01, snapshot=0.001, back=0.011)
    assert c.ratios(0.0)["round"] == pytest.approx(1.1)
    assert c.ratios(0.5)["round"] == pytest.approx(1.65)
    assert costs.predict(c, 1.5, 0.5) == pytest.approx(1.5 / 1.65)


def test_whole_lanes_count_each_prompt_pass_once():
    # plain: 10 ms prompt + 40 tokens x 1 ms = 50 ms; speculative: 12 ms prompt + 20 rounds x 1.5 ms = 42 ms
    c = costs.Costs(k=2, rollback="select", step=1e-3, whole=1.5e-3, prefill=10e-3, prefill_spec=12e-3)
    assert costs.predict(c, 2.0, 0.5, tokens=41, rounds=20) == pytest.approx(50 / 42)
    run = Run("speculative", k=2, rollback="select", tokens=list(range(41)), rounds=20, rolled_back=10)
    assert costs.lane_prediction(c, run) == pytest.approx(50 / 42)


def test_the_flat_verify_assumption_makes_a_pass_over_k_plus_1_tokens_cost_one_step():
    c = costs.Costs(k=2, rollback="select", step=1e-3, draft=0.4e-3, verify=2e-3, keep=0.1e-3, plain_around=0.2e-3)
    flat = c.assuming_flat_verify()
    assert flat.verify == c.step and flat.passes() == pytest.approx(1.5e-3) and c.passes() == pytest.approx(2.5e-3)
    one_call = costs.Costs(k=2, rollback="select", step=1e-3, draft=0.4e-3, verify=2e-3, keep=0.1e-3, whole=2.0e-3)
    # the one call is 2.0 of the 2.5 ms taken apart; the verify's 2 ms become 1 ms: 2.0 x 1.5 / 2.5
    assert one_call.assuming_flat_verify().whole == pytest.approx(1.2e-3)
    assert costs.predict(flat, 2.5) > costs.predict(c, 2.5)


def test_per_token_slope_recovers_a_known_line_and_reads_a_falling_one_as_noise():
    rows = [(0.10 + 0.02 * n, n) for n in (1, 1, 2, 3, 3, 3)]
    intercept, slope = costs.per_token_slope(rows)
    assert slope == pytest.approx(0.02) and intercept == pytest.approx(0.10)
    assert costs.per_token_slope([(0.3, 1), (0.1, 3)])[1] == 0.0
    assert costs.per_token_slope([(0.2, 2), (0.4, 2)]) == (pytest.approx(0.3), 0.0)      # one group: no slope


# --- the terms from lanes, against a hand-made lane ---

def _lane(kind, items, origins=None):
    """A finished Run whose engine seconds per item are `items` [(seconds, tokens)], the prompt's first."""
    run, t = Run(kind, k=2, rollback="select"), 0.0
    for seconds, n in items:
        run.passes.append((t, t + seconds, n))
        t += seconds
        run.tokens += [0] * n
    run.seconds, run.ended = t, "length"
    run.origins = origins or ["main"] * len(run.tokens)
    return run


def test_terms_from_lanes_are_the_lanes_time_less_the_passes_timed_inside():
    # plain: every token 1.3 ms in the lane, 1.0 ms of it the pass: 0.3 ms around
    plain = _lane("plain", [(0.010, 1)] + [(1.3e-3, 1)] * 6)
    plain_passes = [0.009] + [1.0e-3] * 6
    # rounds of 1 and 3 tokens: the lane took 2.0 + 0.1 + 0.02 n ms, the passes 2.0 ms
    ns = [1, 3, 3, 1, 3, 3]
    spec = _lane("speculative", [(0.011, 1)] + [((2.1 + 0.02 * n) * 1e-3, n) for n in ns],
                 ["main"] + sum((["draft"] * (n - 1) + ["correction" if n < 3 else "bonus"] for n in ns), []))
    phases = [{"prefill": 0.01}] + [{"fused": 2.0e-3}] * 6
    c = costs.from_lanes([plain], [plain_passes], [spec], [phases], 2, "select")
    assert c.step == pytest.approx(1.0e-3) and c.plain_around == pytest.approx(0.3e-3)
    assert c.whole == pytest.approx(2.0e-3) and c.per_token == pytest.approx(0.02e-3)
    assert c.round_around == pytest.approx(0.1e-3)
    assert c.samples == {"tokens": 6, "rounds": 6, "runs": 1}


def test_rollback_costs_split_rounds_that_rejected_from_those_that_did_not():
    plain = _lane("plain", [(0.01, 1), (1e-3, 1)])
    spec = _lane("speculative", [(0.01, 1), (5e-3, 1), (3e-3, 3)], ["main", "correction", "draft", "draft", "bonus"])
    phases = [{}, {"verify": 2e-3, "restore": 1e-3, "rerun": 1e-3, "catch_up": 0.4e-3},
              {"verify": 2e-3, "restore": 0.5e-3, "catch_up": 0.2e-3}]
    c = costs.from_lanes([plain], [[0.01, 1e-3]], [spec], [phases], 2, "recompute")
    assert c.back == pytest.approx(2e-3) and c.keep == pytest.approx(0.5e-3) and c.verify == pytest.approx(2e-3)
    # the head's catch-up, a phase of its own, is part of every round's passes
    assert c.catch_up == pytest.approx(0.3e-3) and c.passes(1.0) == pytest.approx(2e-3 + 2e-3 + 0.3e-3)


# --- the engine's timings ---

@pytest.fixture(scope="module")
def tiny():
    from stepper_models import random_model
    model, mtp = random_model()
    return model, mtp, torch.tensor([[3, 4, 5]])


def test_plain_timings_time_each_pass_and_change_nothing(tiny):
    model, _, ids = tiny
    passes = []
    out = list(generate_stream(model, ids, 8, timings=passes))
    assert out == generate(model, ids, 8)
    assert len(passes) == len(out) and all(p > 0 for p in passes)      # the prompt's pass, then one per token


@pytest.mark.parametrize("rollback", ["select", "recompute"])
def test_speculative_timings_give_each_round_its_phases_and_change_nothing(tiny, rollback):
    model, mtp, ids = tiny
    timings = []
    items = list(generate_mtp_stream(model, mtp, ids, 12, k=2, rollback=rollback, timings=timings))
    assert [t for emit, _, _ in items for t, _ in emit] == generate_mtp(model, mtp, ids, 12, k=2,
                                                                       rollback=rollback)[0] == generate(model, ids, 12)
    assert len(timings) == len(items) and "prefill" in timings[0]
    # each round: its passes step by step, or (greedy select where the head fuses them) one call
    assert all((t["verify"] > 0 and t["catch_up"] > 0) or t.get("fused", 0) > 0 for t in timings[1:])
    assert all(t["draft"] > 0 for t in timings[1:] if "fused" not in t)          # k = 2: the head drafts d2
    if rollback == "recompute":
        assert all(t["snapshot"] > 0 for t in timings[1:])


# --- calibrating on the embedded model: once per model and settings, the prompt's pass per prompt ---

@pytest.fixture(scope="module")
def loaded():
    return ModelStore().get()


def test_calibrate_measures_every_term_once_per_settings_and_the_prompt_pass_per_prompt(loaded, monkeypatch):
    monkeypatch.delenv("QWEN_CALIBRATE_SECONDS", raising=False)            # the page's budget
    costs.TABLE.forget()
    settings = race_settings("In the beginning", max_new_tokens=24, k=2)
    ids, _ = prepare(loaded, settings)
    calls = []
    real = race_module.measure_terms
    monkeypatch.setattr(race_module, "measure_terms", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    first = calibrate(loaded, ids, settings)[0]
    assert first.step > 0 and first.plain_around > 0 and first.passes() > 0 and first.round_around >= 0
    assert first.prefill > 0 and first.prefill_spec > 0
    assert first.samples["tokens"] >= 20 and first.samples["rounds"] >= 8
    other, _ = prepare(loaded, race_settings("The LORD is my shepherd; I shall not want.", max_new_tokens=24, k=2))
    again = calibrate(loaded, other, settings)[0]
    assert len(calls) == 1                                 # the terms are kept...
    assert calibrate(loaded, ids, settings)[0].prefill == first.prefill    # and a prompt's pass with them
    assert (again.step, again.round_around, again.passes()) == (first.step, first.round_around, first.passes())
    calibrate(loaded, ids, race_settings("x", k=1))
    assert len(calls) == 2                                 # ...per settings
    sampled = calibrate(loaded, ids, race_settings("x", k=2, temperature=0.5))[0]
    assert len(calls) == 3 and sampled.plain_around > 0    # a sampled pick is another term


def test_a_calibration_budget_spent_by_the_prompts_pass_still_measures_every_term(loaded, monkeypatch):
    """A loaded machine can spend a lane's share of the budget on the prompt's pass alone (CI did: the page
    then showed terms of 0.000 ms and predicted the prompt's pass alone); each lane still runs MIN_ITEMS items."""
    costs.TABLE.forget()
    monkeypatch.setattr(race_module, "CALIBRATE_SECONDS", 1e-9)
    settings = race_settings("In the beginning", max_new_tokens=24, k=2)
    ids, _ = prepare(loaded, settings)
    c = calibrate(loaded, ids, settings)[0]
    assert c.step > 0 and c.plain_token() > 0 and c.passes() > 0 and c.round_seconds(0.0, 2.0) > 0
    assert c.samples["tokens"] >= race_module.MIN_ITEMS and c.samples["rounds"] >= race_module.MIN_ITEMS
    costs.TABLE.forget()


def test_a_race_reports_the_terms_and_the_prediction_in_its_summary(loaded):
    costs.TABLE.forget()
    settings = race_settings("In the beginning God created", max_new_tokens=40, k=2, temperature=0.5, rollback="both")
    ids, _ = prepare(loaded, settings)
    *_, done = race(loaded, ids, settings, repeat=False)
    out = race_module.summary(loaded.key, done.plain, done.lanes, settings, (), lane_costs=done.lane_costs,
                              speedups=done.speedups)
    for lane in (out, out["select"]):
        c = lane["costs"]
        assert {"step", "plain_around", "round_around", "per_token", "prefill", "prefill_spec"} <= set(c)
        run = done.spec if lane is out else done.lanes[1]
        terms = costs.Costs(**{f.name: c[f.name] for f in dataclasses.fields(costs.Costs)})
        assert lane["predicted_speedup"] == pytest.approx(costs.lane_prediction(terms, run), rel=1e-2)
    assert out["races_skipped"] == ""


JOB = "Then the LORD answered Job out of the whirlwind, and said,"


def test_the_steppers_what_if_and_the_races_verdict_read_one_entry_of_the_table(loaded, monkeypatch):
    """The prompt and k of a visitor who saw the two tabs disagree (1.03x against 1.26x): the race's predicted
    speed-up and the stepper's "this run" marker are computed from the same entry of qwen.costs.TABLE, its prompt
    pass included, for the same tokens and rounds, so they agree. Not a timing test: it checks that the two code
    paths take the same inputs (each as its page calls it: demo.race_ui, demo.stepper.ui)."""
    from demo import environment
    from demo.stepper import figures, recording
    from demo.stepper import ui as stepper_ui
    from demo.stepper.steps import Settings
    costs.TABLE.forget()
    settings = race_settings(JOB, max_new_tokens=48, k=2)
    ids, _ = prepare(loaded, settings, environment.max_prompt_tokens())
    *_, done = race(loaded, ids, settings, repeat=False)
    raced = done.lane_costs[0]
    measured = []
    real = race_module.measure_terms
    monkeypatch.setattr(race_module, "measure_terms", lambda *a, **kw: measured.append(1) or real(*a, **kw))
    mine = Settings(JOB, k=2, max_new_tokens=48)
    mine_ids, _ = stepper_ui.encode(loaded, mine)
    run = recording.record_run(*race_module.engine_for(loaded, mine), loaded.chat, mine_ids, mine, loaded.key,
                               context=loaded.context)
    assert torch.equal(mine_ids, ids) and run.output_ids == done.spec.tokens         # the same run...
    assert measured == [] and run.costs == raced.terms()                             # ...and the same entry
    assert costs.TABLE.get(*race_module.engine_for(loaded, settings), 2, "select", lanes="race") is not None
    verdict = costs.lane_prediction(raced, done.spec)
    assert figures.this_run_speedup(run) == pytest.approx(verdict, rel=0.10)
    costs.TABLE.forget()


def test_repeats_give_way_when_visitors_wait(loaded, monkeypatch):
    # room for several repeats (the fast tests' 0.5 s fit one only while the first race took under 0.25 s: a busy
    # moment on a shared 2-core machine left none, and the idle race below looked like a busy one)
    monkeypatch.setattr(race_module, "REPEAT_SECONDS", 2.0)
    settings = race_settings("In the beginning", max_new_tokens=16, k=2)
    ids, _ = prepare(loaded, settings)
    *_, busy = race(loaded, ids, settings, busy=lambda: True)
    assert busy.skipped == "busy" and len(busy.speedups[0]) == 1
    for lang, words in (("English", "others were waiting"), ("中文", "有人在排队")):
        assert words in verdict_html(busy.verdict, busy.plain, busy.lanes, lang, lane_costs=busy.lane_costs, speedups=busy.speedups,
                                     skipped=busy.skipped)
    # room for several repeats of the race as long as it ran just now, however slow this host is at the moment
    first = busy.plain.seconds + sum(lane.seconds for lane in busy.lanes)
    monkeypatch.setattr(race_module, "REPEAT_SECONDS", max(2.0, 4 * first))
    *_, idle = race(loaded, ids, settings)
    assert idle.skipped == "" and len(idle.speedups[0]) > 1


# --- the verdict: the terms in words, the prediction, the term that differs, where the time goes ---

def spec_run(tokens, rounds, rolled_back, seconds, k=2):
    run = Run("speculative", k=k, rollback="select", tokens=list(range(tokens)), rounds=rounds, started=True,
              seconds=seconds, ended="length")
    run.rolled_back = rolled_back
    return run


TERMS = costs.Costs(k=2, rollback="select", step=1.0e-3, draft=0.5e-3, verify=2.0e-3, whole=2.2e-3,
                    plain_around=0.25e-3, round_around=0.05e-3, prefill=10e-3, prefill_spec=12e-3)


def test_the_verdict_names_each_term_and_the_speedup_they_predict():
    plain = Run("plain", tokens=list(range(41)), seconds=0.060, started=True, ended="length")   # 10 + 40 x 1.25 ms
    spec = spec_run(41, 20, 10, 0.012 + 20 * 2.25e-3)                                          # 12 + 20 x 2.25 ms
    html = speed_html(plain, spec, "English", TERMS, [0.060 / 0.057])
    assert "a plain token costs 1.250 ms: its model pass 1.000 ms and 0.250 ms around it" in html
    assert "A round costs 2.250 ms: its model passes 2.200 ms (2 head passes, the verify of 3 tokens, run as one call)" \
        in html and "it yields 2.00 tokens, 1.125 ms each" in html
    assert "these terms predict 1.05×; measured 1.05×" in html and "misses" not in html
    zh = speed_html(plain, spec, "中文", TERMS, [0.060 / 0.057])
    assert "普通解码一个词元耗时 1.250 毫秒" in zh and "预测 1.05×" in zh and "Where" not in zh


def test_the_verdict_says_what_a_head_pass_scores_and_the_corrections_outside_it():
    plain = Run("plain", tokens=list(range(41)), seconds=0.060, started=True, ended="length")
    spec = spec_run(41, 20, 10, 0.012 + 20 * 2.25e-3)
    assert "draft vocabulary" not in speed_html(plain, spec, "English", TERMS, [1.05])     # every token scored
    spec.origins = ["correction" if i in (5, 35) else "draft" for i in spec.tokens]
    spec.draft = frozenset(range(30)), 248320                  # tokens 30-40 outside: 11 of 41, correction 35 one
    html = speed_html(plain, spec, "English", TERMS, [1.05])
    assert "scores its guess over 30 of the 248,320 tokens (a draft vocabulary), which hold 73% of this lane" in html
    assert "1 correction(s) fell outside it" in html
    assert "草稿词表" in speed_html(plain, spec, "中文", TERMS, [1.05])


def test_a_prediction_that_misses_by_more_than_10_percent_names_the_term_that_differs():
    plain = Run("plain", tokens=list(range(41)), seconds=0.010 + 40 * 1.6e-3, started=True, ended="length")
    spec = spec_run(41, 20, 10, 0.012 + 20 * 2.25e-3)
    html = speed_html(plain, spec, "English", TERMS, [plain.seconds / spec.seconds])
    assert "a plain token took 1.600 ms, against 1.250 ms measured on its own (+28%)" in html


def test_terms_that_measured_nothing_name_no_term_and_raise_nothing():
    """A calibration of a token or two (a prompt cut to fill the context) leaves zero terms: the verdict still
    renders, saying the prediction, and names no term (there is nothing to compare against)."""
    plain = Run("plain", tokens=[1, 2], seconds=0.02, started=True, ended="length")
    spec = spec_run(2, 1, 0, 0.02)
    empty = costs.Costs(k=2, rollback="select", step=0.0, draft=0.0, verify=0.0)
    html = speed_html(plain, spec, "English", empty, [1.0])
    assert "these terms predict" in html and "measured on its own" not in html


def test_where_the_time_goes_draws_each_lane_per_token_on_one_scale_with_a_labelled_assumption():
    plain = Run("plain", tokens=list(range(41)), seconds=0.06, started=True, ended="length")
    spec = spec_run(41, 20, 10, 0.057)
    html = time_goes_html(plain, [(spec, TERMS)], "English")
    widths = [float(w) for w in re.findall(r'width:([\d.]+)%', html)]
    # per token: plain 1.0 + 0.25 ms; speculative (2.2 + 0.05) / 2 = 1.1 + 0.025 ms; assumed: 2.2 x 1.2 / 3.2 / 2
    assert widths[:4] == pytest.approx([100 * 1.0 / 1.25, 100 * 0.25 / 1.25, 100 * 1.1 / 1.25, 100 * 0.025 / 1.25],
                                       abs=0.06)
    assert "assumed: a pass over 3 tokens costs one step" in html and "an assumption, not a measurement" in html
    assert "→ 1.05×" in html                         # the lane: (10 + 40 x 1.25) / (12 + 20 x 2.25)
    assert "tg-assumed" in html and "假设" in time_goes_html(plain, [(spec, TERMS)], "中文")


def test_the_verdict_says_why_speculative_was_slower_in_plain_tokens():
    plain = Run("plain", tokens=list(range(41)), seconds=0.06, started=True, ended="length")
    slow = costs.Costs(k=2, rollback="select", step=1.0e-3, draft=0.5e-3, verify=3.0e-3, plain_around=0.25e-3)
    spec = spec_run(41, 20, 10, 0.012 + 20 * 3.5e-3)
    html = verdict_html(Verdict(True, "verdict_identical", {"n": 41}), plain, [spec], "English", lane_costs=[slow],
                        speedups=[[0.06 / spec.seconds]])
    assert "slower" in html and "Why slower: a round yields 2.00 tokens but costs 2.80 plain tokens" in html
    assert "为什么更慢" in speed_html(plain, spec, "中文", slow)


def test_kept_terms_are_measured_again_when_a_race_paid_far_more_than_they_say(loaded, monkeypatch):
    costs.TABLE.forget()
    settings = race_settings("In the beginning", max_new_tokens=24, k=2)
    ids, _ = prepare(loaded, settings)
    c = calibrate(loaded, ids, settings)[0]
    calls = []
    real = race_module.measure_terms
    monkeypatch.setattr(race_module, "measure_terms", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    # long lanes, so that the prompt's pass weighs little
    plain = Run("plain", tokens=list(range(401)), seconds=c.prefill + 400 * c.plain_token())
    spec = Run("speculative", k=2, rollback="select", tokens=list(range(401)), rounds=200)
    spec.seconds = c.prefill_spec + 200 * c.round_seconds(0.0, 2.0)
    calibrate(loaded, ids, settings, raced=[plain, spec])
    assert calls == []                                        # as the terms say: kept
    plain.seconds = c.prefill + 400 * 1.5 * c.plain_token()   # a plain token 50% dearer: the load changed
    calibrate(loaded, ids, settings, raced=[plain, spec])
    assert calls == [1]


# --- one timer and one table ---

def lane(items, origins):
    """A finished lane as the timer sees one: items [(seconds, new tokens)], the prompt's first."""
    out, t = costs.LaneTimes(origins=origins), 0.0
    for seconds, n in items:
        out.passes.append((t, t + seconds, n))
        t += seconds
    out.seconds = t
    return out


def fake_race(step, verify):
    """A race_once whose plain lane pays `step` per token (its pass all of it) and whose k=1 lane pays `verify` per
    round of two tokens (its verify pass all of it), after a 5 ms prompt pass each."""
    def race_once():
        plain = lane([(5e-3, 1)] + [(step, 1)] * 4, ["main"] * 5)
        spec = lane([(5e-3, 1)] + [(verify, 2)] * 2, ["main"] + ["draft", "bonus"] * 2)
        return [plain, spec], [[5e-3] + [step] * 4, [{"prefill": 5e-3}] + [{"verify": verify}] * 2]
    return race_once


def test_the_one_timer_turns_lanes_into_terms_and_leaves_its_warm_up_off_the_record():
    calls = []
    warm, steady = fake_race(9e-3, 9e-3), fake_race(1e-3, 1.5e-3)
    race_once = lambda: (calls.append(1), (warm if len(calls) == 1 else steady)())[1]      # noqa: E731
    (c,) = costs.measure(race_once, [(1, "select", "")], races=2, warmup=1)
    assert len(calls) == 3
    assert c.step == pytest.approx(1e-3) and c.verify == pytest.approx(1.5e-3)            # the warm-up's 9 ms: gone
    assert c.plain_around == pytest.approx(0) and c.round_around == pytest.approx(0)
    assert c.prefill == pytest.approx(5e-3) and c.prefill_spec == pytest.approx(5e-3)
    assert c.samples["per_round"] == 2 and c.samples["rolled_back"] == 0 and c.samples["runs"] == 2
    calls.clear()
    costs.measure(race_once, [(1, "select", "")], races=5, budget=1e-3)                   # spent past the budget
    assert len(calls) == 1


def test_the_table_keeps_one_entry_per_model_head_host_sampling_rollback_and_shape(monkeypatch):
    from test_mtp import random_pair
    model, head = random_pair("small", seed=3)
    table = costs.CostTable()
    c = costs.Costs(k=2, rollback="select", step=1e-3)
    table.put(model, head, 2, "select", c)
    assert table.get(model, head, 2, "select") is c
    assert table.get(model, head, 2, "select", {"temperature": 0}) is c                   # greedy however spelled
    assert table.get(model, head, 2, "recompute") is None
    assert table.get(model, head, 1, "select") is None
    assert table.get(model, head, 2, "select", lanes="race") is None                     # timed in other lanes
    assert table.get(model, head, 2, "select", {"temperature": 0.5, "seed": 1}) is None
    assert table.get(*random_pair("small", seed=3), 2, "select") is None                 # other modules
    other = "AVX512" if torch.backends.cpu.get_cpu_capability() == "AVX2" else "AVX2"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: other)
    assert table.get(model, head, 2, "select") is None                                   # another instruction set


def test_auto_and_the_race_keep_their_costs_in_one_table_apart_by_the_lanes_that_timed_them(loaded, monkeypatch):
    """The race's terms (its own lanes, taking turns) and k="auto"'s round lengths (the engine's bare streams, every
    length timed together so they compare like with like) sit in the one table; neither overwrites the other, and
    auto measures once."""
    from qwen.mtp import lengths_for
    costs.TABLE.forget()
    settings = race_settings("In the beginning", max_new_tokens=24, k=2)
    ids, _ = prepare(loaded, settings)
    calibrate(loaded, ids, settings)
    model, mtp = loaded.engine()
    raced = costs.TABLE.get(model, mtp, 2, "select", lanes="race")
    assert raced is not None and costs.TABLE.get(model, mtp, 2, "select") is None
    measured = []
    real = costs.measure
    monkeypatch.setattr(costs, "measure", lambda race_once, lanes, *a, **kw: measured.append(
        [k for k, _, _ in lanes]) or real(race_once, lanes, *a, **kw))
    seconds = lengths_for(model, mtp, 2).seconds
    assert measured == [[0, 1, 2]]
    own = costs.TABLE.get(model, mtp, 2, "select")
    assert seconds[2] == pytest.approx(max(seconds[1], own.round_seconds(own.samples["rolled_back"],
                                                                         own.samples["per_round"])))
    assert costs.TABLE.get(model, mtp, 2, "select", lanes="race") is raced      # the race's terms stay
    assert lengths_for(model, mtp, 2).seconds == seconds and measured == [[0, 1, 2]]   # kept: measured once
    costs.TABLE.forget()
