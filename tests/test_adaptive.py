"""k="auto": each round drafts only as far as it pays (qwen.adaptive), and the output stays plain decoding's."""
import pytest
import torch

from qwen.adaptive import DraftLengths, fixed_length
from qwen.mtp import generate_mtp, generate_mtp_stream, lengths_for
from qwen.sample import generate
from qwen.scripted import ScriptedHead
from test_mtp import prompts, random_pair

COSTS = (1.0, 1.25, 1.45, 1.65)           # a plain step, then rounds of 1, 2, 3 drafts (in plain steps)


def test_the_rule_worked_by_hand():
    lengths = DraftLengths(COSTS)
    assert lengths.expected([0.5, 0.5]) == [1.0, 1.5, 1.75]
    # rates: 1/1, 1.9/1.25 = 1.52, (1.9 + 0.27)/1.45 = 1.497: the second guess (right 27% of the time) does not pay
    assert lengths.keep([0.9, 0.3]) == 1
    assert lengths.keep([0.9, 0.9]) == 2                      # (1 + 0.9 + 0.81)/1.45 = 1.87 > 1.52
    assert lengths.keep([0.1]) == 0                           # 1.1/1.25 < 1: a plain step
    # draft a third? even if it were surely right: (2.71 + 0.81)/1.65 = 2.13 > 1.87, so yes
    assert lengths.more([0.9, 0.9])
    assert not lengths.more([0.2, 0.2])                       # (1.24 + 0.04)/1.65 < 1: no longer round can pay
    assert not lengths.more([0.9, 0.9, 0.9])                  # max_k reached
    assert lengths.more([])                                   # nothing drafted yet: a guess may pay


def test_under_the_textbook_rule_a_guess_is_kept_on_what_was_known_before_it_was_sampled():
    lengths = DraftLengths(COSTS)
    # rates 1, 1.2/1.25 = 0.96, (1.2 + 0.19)/1.45 = 0.959, (1.39 + 0.18)/1.65 = 0.95: the best is none either way
    assert lengths.keep([0.2, 0.95, 0.95]) == lengths.keep([0.2, 0.95, 0.95], prefix=True) == 0
    # a first guess that pays only because of the guesses drawn after it: kept by the best rate, not by prefix
    c = [0.24, 1.0, 1.0]
    cheap = DraftLengths((1.0, 1.25, 1.26, 1.27))          # rates 1, 0.992, 1.175, 1.362: the best keeps 3
    assert cheap.keep(c) == 3 and cheap.keep(c, prefix=True) == 0     # prefix: 0.992 < 1 stops at the first
    assert cheap.keep([0.9, 1.0, 1.0], prefix=True) == 3


def test_a_run_learns_how_often_guesses_of_each_confidence_are_right():
    lengths = DraftLengths(COSTS)
    assert lengths.likely(0.05) == pytest.approx(0.5)         # nothing seen yet: one half
    for _ in range(20):                                       # guesses at 0.05 right every time
        lengths.drafted = [0.05, 0.05]
        lengths.saw(2)
    assert lengths.likely(0.05) > 0.9
    for _ in range(20):                                       # at 0.7: the first right, the second wrong
        lengths.drafted = [0.7, 0.7, 0.7]
        lengths.saw(1)
    assert 0.4 < lengths.likely(0.7) < 0.6                    # the third never counted: never in question


def test_after_a_plain_step_the_head_rests_longer_each_time_then_probes():
    lengths = DraftLengths(COSTS)
    rests = []
    assert lengths.choose([0.0]) == 0                          # a plain step, then the head rests
    for _ in range(6):
        n = 0
        while lengths.resting():
            n += 1
        rests.append(n)
        assert lengths.choose([0.0]) == 1                      # the round after a rest verifies one guess
    assert rests == [1, 2, 4, 8, 16, 16]                       # and the rest after it grows all the same
    assert lengths.choose([1.0, 1.0]) == 2
    assert lengths.rest_next == 1 and lengths.counts == {0: 1 + sum(rests), 1: 6, 2: 1}


@pytest.mark.parametrize("rollback", ["select", "recompute"])
@pytest.mark.parametrize("costs", [COSTS, (1.0, 5.0, 6.0, 7.0), (1.0, 1.01, 1.02, 1.03)])
def test_auto_equals_plain_greedy(rollback, costs):
    model, head = random_pair("small", seed=1)
    for ids in prompts(model.cfg.vocab_size, n=3, seed=2):
        plain = generate(model, ids, max_new_tokens=30)
        assert generate_mtp(model, head, ids, 30, k="auto", rollback=rollback, lengths=DraftLengths(costs))[0] == plain


@pytest.mark.parametrize("shape", ["small", "untied_conv3"])
def test_auto_equals_plain_sampling_with_a_seed_and_the_measured_costs(shape):
    model, head = random_pair(shape, seed=3)
    for ids in prompts(model.cfg.vocab_size, n=2, seed=4):
        plain = generate(model, ids, max_new_tokens=30, temperature=0.8, seed=5)
        assert generate_mtp(model, head, ids, 30, k="auto", temperature=0.8, seed=5)[0] == plain


def test_auto_with_the_textbook_rule_samples_every_token():
    model, head = random_pair("small", seed=6)
    ids = prompts(model.cfg.vocab_size, n=1, seed=7)[0]
    tokens, _, _ = generate_mtp(model, head, ids, 30, k="auto", temperature=0.8,
                                generator=torch.Generator().manual_seed(0), lengths=DraftLengths(COSTS))
    assert len(tokens) == 30 and all(0 <= t < model.cfg.vocab_size for t in tokens)


@pytest.mark.parametrize("costs, hit_rate, kept", [
    ((1.0, 1.1, 1.2, 1.3), 1.0, 3),          # every guess right, each longer round pays: 3 drafts
    ((1.0, 1.3, 1.5, 100.0), 1.0, 2),        # a round of 3 costs too much: 2
    ((1.0, 1.3, 100.0, 100.0), 1.0, 1),      # only a round of 1 pays: 1
    ((1.0, 1.3, 1.5, 1.7), 0.0, 0),          # every guess wrong: plain steps, the head resting
])
def test_a_scripted_head_forces_each_length(costs, hit_rate, kept):
    model, head = random_pair("small", seed=8)
    ids = prompts(model.cfg.vocab_size, n=1, seed=9)[0]
    plain = generate(model, ids, max_new_tokens=60)
    scripted = ScriptedHead(head, ids[0].tolist() + plain, hit_rate, confidence=0.3)
    lengths = DraftLengths(costs)
    tokens, rounds, hits = generate_mtp(model, scripted, ids, 60, k="auto", lengths=lengths)
    assert tokens == plain
    assert max(lengths.counts, key=lengths.counts.get) == kept, lengths.counts
    assert sum(lengths.counts.values()) == rounds
    if kept == 0:                                              # only the probes after each rest verify a guess
        assert lengths.counts[1] <= 6 and hits == 0


def test_every_length_is_timed_and_a_round_of_none_yields_one_plain_token():
    model, head = random_pair("small", seed=10)
    ids = prompts(model.cfg.vocab_size, n=1, seed=11)[0]
    lengths = lengths_for(model, head, 2)
    assert len(lengths.seconds) == 3 and all(s > 0 for s in lengths.seconds)
    assert list(lengths.seconds) == sorted(lengths.seconds)               # a longer round never reads cheaper
    assert lengths_for(model, head, 2).seconds == lengths.seconds           # measured once
    origins = [o for emit, _, _ in generate_mtp_stream(model, head, ids, 20, k="auto",
                                                       lengths=fixed_length(0, 2)) for _, o in emit]
    assert set(origins) <= {"main", "draft", "correction", "bonus"} and origins.count("main") >= 15


def test_auto_refuses_what_it_cannot_do():
    model, head = random_pair("small")
    ids = prompts(model.cfg.vocab_size, n=1)[0]
    with pytest.raises(ValueError, match="tree"):
        generate_mtp(model, head, ids, 5, k="auto", tree="2+1")
    with pytest.raises(ValueError, match="max_k"):
        generate_mtp(model, head, ids, 5, k="auto", max_k=9)
    with pytest.raises(ValueError, match="auto"):
        generate_mtp(model, head, ids, 5, k="often")


def test_a_trace_records_each_rounds_choice_and_the_output_stays_plain():
    from qwen.trace import Trace
    model, head = random_pair("small", seed=12)
    ids = prompts(model.cfg.vocab_size, n=1, seed=13)[0]
    trace = Trace()
    tokens, rounds, _ = generate_mtp(model, head, ids, 40, k="auto", trace=trace, lengths=DraftLengths(COSTS))
    assert tokens == generate(model, ids, max_new_tokens=40) and len(trace) == rounds + 1
    for record in trace[1:]:
        d = record["decision"]
        assert d["kept"] == record["k"] == len(record["draft"]) and d["steps"] == [1.0, 1.25, 1.45, 1.65]
        if not d.get("rested"):
            assert len(d["confidence"]) == len(d["chance"]) == len(d["reach"]) == len(d["break_even"]) >= d["kept"]
            assert d["break_even"][0] == pytest.approx(0.25)           # k = 1's break-even: 1.25 / 1 - 1
            assert all(0 <= r <= p <= 1 for r, p in zip(d["reach"], d["chance"]))


def test_the_length_bench_prints_measured_and_predicted_speedups_and_every_run_identical(capsys):
    from demo import length_bench
    threads = torch.get_num_threads()
    try:
        length_bench.main(["--prompts", "1", "--repeats", "1", "--max-k", "2"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "CPU capability" in out and "predicted by the round costs alone" in out
    measured, predicted = [line for line in out.splitlines() if line.startswith("| 1 In the beginning")]
    assert measured.rstrip(" |").endswith("True") and len(predicted.split(" | ")) == 1 + 3   # k=1, k=2, auto
    # a fixed k's prediction: plain tokens at a plain step each over its rounds at a round's cost
    assert all(float(cell.strip(" |×")) > 0 for cell in predicted.split(" | ")[1:])
