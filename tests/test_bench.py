"""The speculative benchmark on a real checkpoint (the embedded one, eager): every row identical to plain
decoding, and plain decoding timed alternately with each setting."""
import json

from qwen import bench


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
