"""The app end to end: launched on a free port, driven through gradio_client like a script would."""
import json
import urllib.request

import pytest

gradio_client = pytest.importorskip("gradio_client")


@pytest.fixture(scope="module")
def client(app_url):
    c = gradio_client.Client(app_url, verbose=False)
    yield c
    c.close()


def test_race_api_returns_a_consistent_summary(client):
    *streamed, summary = client.predict("In the beginning God created", 24, api_name="/race")
    assert summary["model"] == "Embedded demo checkpoint"
    plain, spec = summary["plain"], summary["speculative"]
    assert summary["identical"] is True and plain["text"] == spec["text"] and plain["text"]
    assert plain["tokens"] == spec["tokens"] == len(plain["ids"]) and 1 <= plain["tokens"] <= 24
    assert spec["rounds"] >= 1 and 0 <= spec["hits"] <= spec["rounds"] * spec["k"]
    assert (spec["k"], spec["rollback"]) == (2, "select") and 0 <= spec["acceptance"] <= 1
    assert summary["speedup"] > 0 and plain["tok_s"] > 0 and spec["seconds"] > 0
    assert "race-text" in streamed[2] and "tok-main" in streamed[4] and "verdict ok" in streamed[5]
    assert len(streamed) == 8                               # ..., verdict, third lane's stats and text


def test_race_api_takes_every_setting(client):
    *_, summary = client.predict("床前明月光，", 12, 3, "recompute", 0.0, 0, True, False, "Embedded demo checkpoint",
                                 "中文", api_name="/race")
    assert summary["identical"] is True and summary["raw"] is True
    assert (summary["speculative"]["k"], summary["speculative"]["rollback"]) == (3, "recompute")


def test_race_api_compares_both_rollbacks_in_three_lanes(client):
    out = client.predict("床前明月光，", 16, 2, "both", 0.0, 0, True, False, "Embedded demo checkpoint", "English",
                         api_name="/race")
    assert len(out) == 9                                    # ..., verdict, third lane's stats and text, summary
    status, plain_stats, plain_text, spec_stats, spec_text, verdict, select_stats, select_text, summary = out
    assert summary["identical"] is True and summary["rollback"] == "both"
    spec, third = summary["speculative"], summary["select"]
    assert (spec["rollback"], third["rollback"]) == ("recompute", "select")
    assert summary["plain"]["ids"] == spec["ids"] == third["ids"] and third["tokens"] >= 1
    assert third["speedup"] > 0 and third["predicted_speedup"] > 0 and third["costs"]["rollback"] == "select"
    assert "verdict ok" in verdict and "all 3 runs" in verdict and "select: " in verdict
    assert "k = 2 · select" in select_stats and "tok-main" in select_text and "k = 2 · recompute" in spec_stats
    *_, lane_off, single = client.predict("床前明月光，", 4, api_name="/race")
    assert "select" not in single and "only with" in lane_off       # one speculative lane: the third says so


def test_bad_input_gets_a_message_and_the_app_keeps_serving(client):
    status, *_, summary = client.predict("   \x00 ", 8, api_name="/race")
    assert summary == {"error": "The prompt is empty: type some text first."} and "empty" in status
    *_, summary = client.predict("hi", -3, api_name="/race")              # clamped, and said so
    assert summary["max_new_tokens"] == 1 and "outside 1–512" in " ".join(summary["notices"])
    *_, summary = client.predict("<|im_end|> \x07ok", 8, api_name="/race")
    assert summary["identical"] is True and summary["notices"]


def test_a_lone_surrogate_sent_as_raw_json_is_removed(client):
    # gradio_client cannot even encode "\ud800"; a hand-made request can (JSON escapes are ASCII)
    base = client.src.rstrip("/")
    data = ["x\ud800y", 6, 2, "select", 0, 0, False, False, "Embedded demo checkpoint", "English"]
    body = json.dumps({"data": data}).encode("ascii")
    request = urllib.request.Request(f"{base}/gradio_api/call/race", body, {"Content-Type": "application/json"})
    event_id = json.load(urllib.request.urlopen(request, timeout=30))["event_id"]
    stream = urllib.request.urlopen(f"{base}/gradio_api/call/race/{event_id}", timeout=60).read().decode()
    final = [line for line in stream.splitlines() if line.startswith("data:")][-1]
    summary = json.loads(final[5:])[-1]
    assert summary["identical"] is True and "removed" in " ".join(summary["notices"])


def test_unknown_models_are_refused(client):
    *_, summary = client.predict("hi", 8, 2, "select", 0.0, 0, False, False, "/etc", api_name="/race")
    assert "not one of the offered models" in summary["error"]
