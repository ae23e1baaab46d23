"""This host's costs of a speculative round and the speed-up they predict (demo.costs), and how the
race's verdict reports them: tokens per main-model pass, verify ÷ step, draft ÷ step, predicted vs measured."""
import pytest
import torch

from demo import costs
from demo.race import Run
from demo.race_html import speed_html, verdict_html
from demo.race import Verdict


def round_record(draft, verify, rolled_back, restore=0.0, rerun=0.0, snapshot=0.0):
    return {"kind": "round", "rolled_back": rolled_back,
            "seconds": {"draft": draft, "verify": verify, "snapshot": snapshot, "restore": restore, "rerun": rerun}}


def test_predicted_speedup_is_tokens_per_round_over_round_cost_in_plain_steps():
    c = costs.Costs(k=2, rollback="select", step=0.010, draft=0.002, verify=0.012)
    r = c.ratios()
    assert r["verify"] == pytest.approx(1.2) and r["draft"] == pytest.approx(0.1) and r["round"] == pytest.approx(1.4)
    assert costs.predict(c, tokens_per_round=2.8) == pytest.approx(2.0)
    # a CPU whose verify pass over 3 tokens costs 2.5 steps: the same acceptance is slower than plain
    slow = costs.Costs(k=2, rollback="select", step=0.010, draft=0.002, verify=0.025)
    assert costs.predict(slow, tokens_per_round=2.4) < 1


def test_recompute_pays_its_rollbacks_only_in_rounds_that_reject():
    c = costs.Costs(k=1, rollback="recompute", step=0.01, draft=0.0, verify=0.01, snapshot=0.001, back=0.011)
    assert c.ratios(0.0)["round"] == pytest.approx(1.1)
    assert c.ratios(0.5)["round"] == pytest.approx(1.65)
    assert costs.predict(c, 1.5, 0.5) == pytest.approx(1.5 / 1.65)


def test_costs_from_records_are_medians_after_the_warm_up_round():
    records = [{"kind": "prefill", "seconds": {}}, round_record(1.0, 9.0, True, 5.0),     # warm-up: left out
               round_record(0.1, 0.3, False), round_record(0.2, 0.2, True, 0.05, 0.1), round_record(0.3, 0.4, False)]
    c = costs.from_records(records, k=1, rollback="recompute", step=0.2)
    assert (c.draft, c.verify) == (0.2, 0.3)
    assert c.back == pytest.approx(0.15) and c.keep == 0.0


def test_measured_costs_come_from_the_real_engine(tiny):
    model, mtp, ids = tiny
    c = costs.measure(model, mtp, ids, k=2, rollback="recompute", rounds=3)
    assert c.step > 0 and c.verify > 0 and c.draft > 0 and c.snapshot > 0
    assert 0 < costs.predict(c, 2.0) < 50


def test_a_round_run_as_one_call_costs_what_that_call_costs():
    # taken apart step by step the round would cost 1.2 + 2 x 0.3 = 1.8 steps; as one call it cost 1.5
    c = costs.Costs(k=2, rollback="select", step=0.010, draft=0.006, verify=0.012, whole=0.015)
    r = c.ratios()
    assert r["round"] == pytest.approx(1.5) and r["verify"] == pytest.approx(1.2) and r["draft"] == pytest.approx(0.3)
    assert costs.predict(c, tokens_per_round=2.4) == pytest.approx(1.6)
    assert costs.predict(costs.Costs(k=2, rollback="select", step=0.010, draft=0.006, verify=0.012), 2.4) \
        == pytest.approx(2.4 / 1.8)


def test_measured_costs_time_whole_rounds_where_the_race_runs_them_as_one_call(tiny, monkeypatch):
    import qwen.mtp
    model, mtp, ids = tiny
    calls = []
    real = qwen.mtp.greedy_round
    monkeypatch.setattr(qwen.mtp, "greedy_round", lambda *a: calls.append(1) or real(*a))
    each = costs.measure_each(model, mtp, ids, 2, ("recompute", "select"), rounds=3)
    assert each["select"].whole > 0 and len(calls) >= 4       # greedy select: rounds of one call each, timed
    assert each["select"].ratios()["round"] == pytest.approx(each["select"].whole / each["select"].step)
    assert each["recompute"].whole == 0                        # recompute runs step by step: its parts add up
    calls.clear()
    rejection = dict(temperature=0.8, generator=torch.Generator().manual_seed(0))
    sampled = costs.measure(model, mtp, ids, 2, "select", rounds=3, sampling=rejection)
    assert sampled.whole == 0 and not calls                    # rejection sampling: rounds step by step
    shared = costs.measure(model, mtp, ids, 2, "select", rounds=3, sampling=dict(temperature=0.8, seed=1))
    assert shared.whole > 0 and calls                          # shared noise: rounds of one call, as greedy


def test_the_verdict_names_the_one_call_round_cost_and_predicts_from_it():
    plain = Run("plain", tokens=list(range(41)), seconds=1.0, started=True, ended="length")
    spec = spec_run(41, 20, 10, 1.25)                       # 2 tokens a round, 0.80x
    one_call = costs.Costs(k=2, rollback="select", step=0.010, draft=0.004, verify=0.014, whole=0.025)
    html = speed_html(plain, spec, "English", one_call)
    assert "a whole round (2 head passes and the verify of 3 tokens, run as one call) costs 2.50 plain steps" in html
    assert "the verify costs 1.40 and a head pass 0.20" in html and "predicted 0.80×" in html
    assert "Why slower: a round yields 2.00 tokens but costs 2.50 plain steps" in html
    assert "合为一次调用" in speed_html(plain, spec, "中文", one_call)


@pytest.fixture(scope="module")
def tiny():
    import torch
    from stepper_models import random_model
    model, mtp = random_model()
    return model, mtp, torch.tensor([[3, 4, 5]])


def spec_run(tokens, rounds, rolled_back, seconds):
    run = Run("speculative", k=2, rollback="select", tokens=list(range(tokens)), rounds=rounds, started=True,
              seconds=seconds, ended="length")
    run.rolled_back = rolled_back
    return run


def test_the_verdict_says_why_speculative_was_slower_in_measured_numbers():
    plain = Run("plain", tokens=list(range(41)), seconds=1.0, started=True, ended="length")
    spec = spec_run(41, 20, 10, 1.25)                       # 2 tokens a round, slower than plain
    slow = costs.Costs(k=2, rollback="select", step=0.010, draft=0.002, verify=0.025)
    html = verdict_html(Verdict(True, "verdict_identical", {"n": 41}), plain, spec, "English", slow)
    assert '0.80× <span class="vh-word">slower</span>' in html and "2.00 tokens per main-model pass" in html
    assert "verifying 3 tokens in one pass costs 2.50 plain steps" in html and "one draft pass 0.10" in html
    assert "predicted 0.74×" in html and "Why slower" in html
    zh = speed_html(plain, spec, "中文", slow)
    assert "为什么更慢" in zh and "Why" not in zh
    fast = costs.Costs(k=2, rollback="select", step=0.010, draft=0.001, verify=0.011)
    assert "Why slower" not in speed_html(plain, spec_run(41, 20, 10, 0.8), "English", fast)
