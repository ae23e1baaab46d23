"""k="auto" in the stepper (demo.stepper.decision and the plain steps it records): a recorded auto run writes what
plain decoding writes, every step draws in both languages, a plain step is said as one, each round's choice is
drawn from its record and said with the numbers of a hand-worked example, and the run travels as a trace file."""
import json

import pytest
import torch

from demo.stepper import decision as D
from demo.stepper import panels as H
from demo.stepper import recording, steps, traceio
from demo.stepper import ui as stepper_ui
from demo.stepper.steps import Settings
from demo.i18n import t
from demo.choices import AUTO_MAX_K
from qwen.adaptive import DraftLengths, decision
from qwen.sample import generate
from stepper_models import FakeChat, random_model

PROMPT = torch.tensor([[5, 9, 10]])
DEAR = (1.0, 1.6, 2.2, 2.8)         # a guess adds 0.6 of a step: the random head's guesses seldom pay
CHEAP = (1.0, 1.02, 1.04, 1.06)     # a guess adds almost nothing: the head drafts


@pytest.fixture(scope="module")
def rand():
    return random_model()


def record_auto(pair, seconds, monkeypatch, **settings):
    """An auto run recorded with a round's cost by length fixed (this host's measurement left out)."""
    monkeypatch.setattr(recording, "lengths_for", lambda *a: DraftLengths(seconds))
    model, mtp = pair
    return recording.record_run(model, mtp, FakeChat(), PROMPT, Settings(prompt="p", k=AUTO_MAX_K, auto=True,
                                                                         **settings), "tiny")


@pytest.mark.parametrize("seconds", [DEAR, CHEAP])
def test_an_auto_run_writes_what_plain_decoding_writes(rand, monkeypatch, seconds):
    run = record_auto(rand, seconds, monkeypatch, max_new_tokens=24)
    plain = generate(rand[0], PROMPT, 24)
    assert run.output_ids == plain
    kept = [rec["k"] for rec in run.records[1:]]
    assert all(rec["decision"]["kept"] == rec["k"] for rec in run.records[1:])
    if seconds == DEAR:                         # plain steps, rests between them, probes after
        assert 0 in kept and any(rec["decision"].get("rested") for rec in run.records[1:])
    else:
        assert max(kept) >= 2


def test_every_step_of_an_auto_run_draws_and_a_plain_step_says_it_is_one(rand, monkeypatch):
    run = record_auto(rand, DEAR, monkeypatch, max_new_tokens=12)
    plain = next(r for r in range(1, len(run.records)) if run.records[r]["k"] == 0)
    for lang in ("English", "中文"):
        for step in range(steps.n_steps(run)):
            out = dict(zip(stepper_ui.VIEW, stepper_ui.render(stepper_ui.Session(run, step=step), lang)))
            assert out["bottom"] is not None and out["bottom_caption"]
    for phase in ("guess", "verify", "accept"):
        step = steps.step_of(plain, phase)
        assert H.explanation(run, step, "English") == t(f"explain_{phase}_none", "English")
    accept = H.phase_panel(run, steps.step_of(plain, "accept"), "English")
    assert t("memory_plain", "English") in accept and "correction" not in accept
    assert t("decision_none", "English") in H.phase_panel(run, steps.step_of(plain, "guess"), "English")


def test_the_figure_draws_each_guess_against_where_it_pays_from_the_record(rand, monkeypatch):
    run = record_auto(rand, CHEAP, monkeypatch, max_new_tokens=16)
    rec = next(r for r in run.records[1:] if r["decision"].get("chance") and 0 < r["decision"]["kept"] < 3)
    d = rec["decision"]
    fig = D.decision_figure(rec)
    bars = [trace for trace in fig.data if trace.type == "bar"]
    assert [y for trace in bars for y in trace.y] == pytest.approx(d["reach"])
    assert len(bars[0].x) == d["kept"]                    # the first bars: the positions drafted
    marks = {trace.name: list(trace.y) for trace in fig.data if trace.type == "scatter"}
    assert marks[t("decision_pays", "English")] == pytest.approx([max(0.0, b) for b in d["pays_above"]])
    assert marks[t("decision_head", "English")] == pytest.approx(d["chance"])
    assert d["reach"] == pytest.approx([d["chance"][0], d["chance"][0] * d["chance"][1],
                                        d["chance"][0] * d["chance"][1] * d["chance"][2]], abs=1e-3)
    rest = {"rested": True, "kept": 0, "steps": [1.0, 1.5]}
    words = [a.text for a in D.decision_figure({"decision": rest}).layout.annotations]
    assert words == [t("decision_rest_short", "English")]


def test_the_sentence_says_a_hand_worked_round():
    """A round of 0..3 drafts costs 1, 1.25, 1.45, 1.65 plain steps; lately the head's first draft was right 90% of
    the time, a second (after a right first) 30%, a third 30%. One draft: 1.9 tokens in 1.25 steps (1.52 a step)
    beats a plain step's 1. A second would add 0.20 of a step for 0.9 x 0.3 = 0.27 of a token: 2.17 tokens in 1.45
    steps, 1.497 a step, less than 1.52; it pays only above 1.9 x (1.45 / 1.25 - 1) = 0.304. A third: 2.251 tokens
    in 1.65 steps, 1.364. So the round drafts one."""
    lengths = DraftLengths((1.0, 1.25, 1.45, 1.65))
    chances = [0.9, 0.3, 0.3]
    kept = lengths.keep(chances)
    d = decision(lengths, chances, kept)
    assert kept == 1 and d["reach"] == pytest.approx([0.9, 0.27, 0.081])
    assert d["pays_above"][:2] == pytest.approx([0.25, 0.304])
    said = D.decision_sentence({"decision": d}, "English")
    assert said.startswith("Drafts 1") and "draft 2" in said
    assert "27%" in said and "0.20 of a step" in said and "0.27 of a token" in said and "above 0.30" in said
    assert "0.20" in D.decision_sentence({"decision": d}, "中文")
    plain = decision(lengths, [0.05] * 3, lengths.keep([0.05] * 3))   # 1.05 tokens in 1.25 steps: 0.84 a step
    said = D.decision_sentence({"decision": plain}, "English")
    assert plain["kept"] == 0 and said.startswith("A plain step") and "5%" in said and "above 0.25" in said
    most = decision(lengths, [0.95] * 3, lengths.keep([0.95] * 3))
    assert most["kept"] == 3 and "the most k = auto drafts" in D.decision_sentence({"decision": most}, "English")
    assert D.decision_sentence({"decision": {"rested": True, "kept": 0, "steps": [1.0]}}, "English") == \
        t("decision_rested", "English")
    assert D.decision_sentence({"round": 1}, "English") == ""          # a fixed k's round: nothing to say


def test_an_auto_run_travels_as_a_trace_and_a_bad_decision_is_refused(rand, monkeypatch):
    run = record_auto(rand, DEAR, monkeypatch, max_new_tokens=12)
    back = traceio.loads(traceio.dumps(run))
    assert back.settings.auto and back.records == run.records and back.output_ids == run.output_ids
    assert stepper_ui.controls_of(back)["auto"] is True
    data = json.loads(traceio.dumps(run))
    r = next(i for i, rec in enumerate(data["records"]) if i and rec["k"] == 0)
    data["records"][r]["decision"]["kept"] = 2
    with pytest.raises(traceio.TraceError, match="decision"):
        traceio.loads(json.dumps(data))
    data = json.loads(traceio.dumps(run))
    data["settings"]["auto"] = False                 # a plain step in a run of a fixed k
    with pytest.raises(traceio.TraceError, match="k"):
        traceio.loads(json.dumps(data))


def test_the_stepper_reads_k_auto_from_its_switch_and_from_a_link():
    chosen = dict(k=1, rollback="select", max_new_tokens=8, temperature=0, seed=0, watch_layer=-1, watch_head=-1,
                  raw=True, auto=True)
    settings, _ = stepper_ui.read_settings("p", tree="", **chosen)
    assert settings.auto and settings.k == AUTO_MAX_K
    tree, _ = stepper_ui.read_settings("p", tree="2+1", **chosen)
    assert not tree.auto and tree.k == 2                       # a tree keeps its shape

    class Request:
        query_params = {"k": "auto", "view": "step"}
    assert stepper_ui.apply_deep_link(Request()) == {"auto": True, "view": "step"}
