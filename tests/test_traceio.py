"""Record and replay: an exported trace loads back unchanged; malformed, oversized and hostile uploads are
rejected with a message that names the problem, and nothing in them is ever executed."""
import copy
import json
import pickle

import pytest
import torch

from demo.stepper import traceio
from demo.stepper import panels as stepper_html, recording as stepper_run, ui as stepper_ui
from demo.stepper.steps import Settings
from stepper_models import FakeChat, random_model


@pytest.fixture(scope="module")
def run():
    model, mtp = random_model()
    return stepper_run.record_run(model, mtp, FakeChat(), torch.tensor([[1, 2, 3]]),
                              Settings("a prompt 中文", k=2, max_new_tokens=6), "tiny")


@pytest.fixture
def exported(run):
    return json.loads(traceio.dumps(run))


def rejected(obj_or_bytes):
    data = obj_or_bytes if isinstance(obj_or_bytes, (bytes, str)) else json.dumps(obj_or_bytes)
    with pytest.raises(traceio.TraceError) as e:
        traceio.loads(data)
    assert str(e.value)
    return str(e.value)


def test_export_then_import_gives_the_same_run_with_no_model(run, tmp_path):
    path = traceio.write_trace(run, str(tmp_path))
    back = traceio.read_trace(path)
    assert back.replay and not run.replay
    assert back.records == run.records and back.output_ids == run.output_ids and back.pieces == run.pieces
    assert back.labels == run.labels and back.settings == run.settings and back.model_name == "tiny"
    assert back.costs == run.costs and run.costs["verify"] > 0      # the race's measurement travels with the trace
    saved = json.loads(open(path, encoding="utf-8").read())
    assert saved["format"] == "qwen-mtp-trace" and saved["version"] == 1 and saved["prompt"] == "a prompt 中文"
    assert saved["output_text"] == "".join(run.pieces)
    out = dict(zip(stepper_ui.VIEW, stepper_ui.render(stepper_ui.Session(back, step=3), "English")))  # no model
    assert 'data-phase="accept"' in out["heading"] and out["upper"] is not None


def test_a_loaded_trace_sets_the_controls_to_its_settings(tmp_path):
    model, mtp = random_model()
    settings = Settings("another prompt", k=3, rollback="recompute", max_new_tokens=5, temperature=0.0, seed=7,
                        watch_layer=1, watch_head=1, raw=True)
    run = stepper_run.record_run(model, mtp, FakeChat(), torch.tensor([[1, 2, 3]]), settings, "tiny")
    back = traceio.read_trace(traceio.write_trace(run, str(tmp_path)))
    assert tuple(stepper_ui.controls_of(back).values()) == ("another prompt", 3, "recompute", 5, 0.0, 7, 1, 1, True, "",
                                                           False)
    assert tuple(stepper_ui.controls_of(back)) == stepper_ui.CONTROLS
    session, out = stepper_ui.render_changes(stepper_ui.new_session(back), stepper_ui.Look())
    assert session.step == 0 and 'data-phase="prefill"' in out[0]


def test_a_step_sends_only_the_figures_that_changed(run):
    session, first = stepper_ui.render_changes(stepper_ui.new_session(run), stepper_ui.Look())
    assert all(x is not None and not isinstance(x, dict) for x in first[4:12])      # everything at the start
    session, guess = stepper_ui.render_changes(stepper_ui.moved(session, "next"), stepper_ui.Look())
    sent = [name for name, x in zip(stepper_ui.VIEW, guess) if not isinstance(x, dict)]
    assert sent == ["heading", "text", "panel", "explain", "beside", "upper", "left", "middle", "right", "lower_left",
                    "lower_right"]
    session, verify = stepper_ui.render_changes(stepper_ui.moved(session, "next"), stepper_ui.Look())
    sent = [name for name, x in zip(stepper_ui.VIEW, verify) if not isinstance(x, dict)]
    assert sent == ["heading", "text", "panel", "explain", "beside", "upper", "left", "middle", "right"]   # same round
    _, dark = stepper_ui.render_changes(session, stepper_ui.Look(dark=True))
    assert not any(isinstance(x, dict) for x in dark)                                  # a new look: all again


@pytest.mark.parametrize("data, words", [
    (b"\x80\x04\x95 not json", "UTF-8"),
    (pickle.dumps({"format": "qwen-mtp-trace"}), "UTF-8"),
    (b"{'format': 1}", "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested"),
    (b'{"a":' * 20 + b"1" + b"}" * 20, "nested"),
    (b"[1, 2, NaN]", "NaN"),
    (b'{"x": -Infinity}', "Infinity"),
    (b'{"x": 1' + b"0" * 5000 + b"}", "too long"),
    (b"[]", "expected an object"),
])
def test_not_a_trace_is_rejected_before_any_field_is_used(data, words):
    assert words in rejected(data)


def test_an_oversized_file_is_refused_unread(tmp_path):
    path = tmp_path / "big.json"
    with open(path, "wb") as f:
        f.truncate(traceio.MAX_BYTES + 1)
    assert "limit" in pytest.raises(traceio.TraceError, traceio.read_trace, str(path)).value.args[0]
    assert "over" in rejected(b" " * (traceio.MAX_BYTES + 1))


def edit(exported, path, value):
    obj = copy.deepcopy(exported)
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return obj


@pytest.mark.parametrize("path, value, words", [
    (("format",), "something-else", "format"),
    (("version",), 99, "version"),
    (("records", 1, "draft", 0, "prob"), "0.5", "records[1].draft[0].prob: expected a number"),
    (("records", 1, "draft", 0, "prob"), 1e308 * 10, "finite"),
    (("records", 1, "draft", 0, "prob"), 7.0, "0..1"),
    (("records", 1, "draft", 0, "token"), -3, "outside"),
    (("records", 1, "draft", 0, "token"), 4.0, "expected an integer"),
    (("records", 1, "accepted"), True, "expected an integer"),
    (("records", 1, "verify"), [], "items"),
    (("records", 1, "states", "after", "memory"), [[0.0] * 10_000], "items"),
    (("records", 1, "states", "after", "memory"), [[0.0, 1.0], [0.0]], "rows differ"),
    (("records", 1, "states", "after", "kv"), "<script>alert(1)</script>", "expected a list"),
    (("records", 1, "emitted", 0, "origin"), "__import__('os')", "expected one of"),
    (("records", 1, "round"), 5, "in order"),
    (("records",), [], "items"),
    (("output_ids",), [1] * 100_000, "items"),
    (("output_ids", 0), 12345, "do not match"),
    (("labels",), {"not-a-number": "x"}, "not a token id"),
    (("settings", "k"), 99, "outside"),
    (("settings", "rollback"), "eval", "expected one of"),
    (("pieces",), ["only one"], "one text per output token"),
    (("costs", "verify"), "fast", "costs.verify: expected a number"),
    (("costs", "k"), 3, "another k or rollback"),
    (("costs",), {"k": 2}, "missing"),
])
def test_a_trace_with_a_bad_field_is_rejected_naming_the_field(exported, path, value, words):
    assert words in rejected(edit(exported, path, value))


def test_a_huge_record_list_is_rejected(exported):
    obj = edit(exported, ("records",), exported["records"] * (traceio.MAX_ROUNDS // len(exported["records"]) + 2))
    assert "records" in rejected(obj)


def test_hostile_text_in_a_valid_trace_is_shown_escaped(run, exported):
    token = run.output_ids[0]
    obj = edit(exported, ("labels", str(token)), "<img src=x onerror=alert(1)>")
    obj["pieces"][0] = "<script>alert(2)</script>"
    back = traceio.loads(json.dumps(obj))
    html = stepper_html.phase_panel(back, 0, "English") + stepper_html.text_so_far(back, 0, "English")
    assert "<img" not in html and "<script>" not in html and "&lt;img" in html and "&lt;script&gt;" in html
