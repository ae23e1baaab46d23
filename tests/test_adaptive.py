"""k="auto": each round drafts only as far as it pays (qwen.adaptive), and the output stays plain decoding's."""
import pytest
import torch

from qwen import adaptive
from qwen.adaptive import DraftLengths, fixed_length
from qwen.mtp import generate_mtp, generate_mtp_stream, lengths_for
from qwen.sample import generate
from qwen.scripted import ScriptedHead
from test_mtp import prompts, random_pair

COSTS = (1.0, 1.25, 1.45, 1.65)           # a plain step, then rounds of 1, 2, 3 drafts (in plain steps)


def test_the_rule_worked_by_hand():
    lengths = DraftLengths(COSTS)
    assert lengths.expected([0.5, 0.5]) == [1.0, 1.5, 1.75]
    # rates: 1/1, 1.9/1.25 = 1.52, (1.9 + 0.27)/1.45 = 1.497, (2.17 + 0.081)/1.65 = 1.364: one draft pays best
    assert lengths.keep([0.9, 0.3, 0.3]) == 1
    assert lengths.keep([0.9, 0.9, 0.3]) == 2                 # (1 + 0.9 + 0.81)/1.45 = 1.87 > 1.52 and > 1.79
    assert lengths.keep([0.9, 0.9, 0.9]) == 3                 # (2.71 + 0.729)/1.65 = 2.08
    assert lengths.keep([0.2, 0.9, 0.9]) == 1                 # 1.2/1.25 = 0.96 of a plain step: not worth a rest
    assert lengths.keep([0.05, 0.9, 0.9]) == 0                # 1.05/1.25 = 0.84, below REST_BELOW: a plain step
    # a round of j beats one of j - 1 exactly above its break-even reach: 1.25 - 1, then 1.9 · (1.45/1.25 - 1)
    assert lengths.pays_above([0.9, 0.3, 0.3]) == pytest.approx([0.25, 0.304, 2.17 * (1.65 / 1.45 - 1)])


def test_each_position_learns_its_own_chance_and_recent_rounds_weigh_most():
    lengths = DraftLengths(COSTS)
    assert lengths.chances() == pytest.approx([0.9, 0.9, 0.9])           # nothing seen: hopeful
    for _ in range(20):                       # rounds of 3 drafts: the first right, the second wrong
        lengths.saw(3, 1)
    a1, a2, a3 = lengths.chances()
    assert a1 > 0.9 and a2 < 0.2 and a3 == pytest.approx(a2)     # the third never in question: leans on the second
    for _ in range(10):                       # then every draft right: the first position forgets its misses
        lengths.saw(3, 3)
    assert lengths.chances()[1] > 0.5 and lengths.chances()[2] > 0.8


def test_choosing_none_rests_the_head_longer_each_time_then_probes():
    lengths = DraftLengths(COSTS)
    for _ in range(30):                       # the first draft always wrong: the rule chooses a plain step
        lengths.saw(1, 0)
    rests = []
    assert lengths.choose() == 0 and lengths.decision["kept"] == 0 and not lengths.decision.get("rested")
    for _ in range(6):
        n = 0
        while lengths.rest:
            assert lengths.choose() == 0 and lengths.decision["rested"]
            n += 1
        rests.append(n)
        assert lengths.choose() == 1 and lengths.decision["probe"]      # back from a rest: one draft, verified
        lengths.saw(1, 0)
    assert rests == [4, 8, 16, 32, 32, 32]    # and the rest after each wrong probe grows
    for _ in range(30):
        lengths.saw(3, 3)
    while lengths.rest:                       # the rest after the last wrong probe runs its course
        lengths.choose()
    assert lengths.choose() == 3 and lengths.rest_next == adaptive.FIRST_REST
    assert lengths.counts == {0: 1 + sum(rests) + 32, 1: 6, 3: 1}


def test_a_probe_drafts_the_cheapest_way_to_learn():
    # rounds of 1 and 3 uncompiled here (dear), of 2 compiled: after a rest the probe drafts 2
    lengths = DraftLengths((1.0, 9.0, 1.5, 9.0))
    for _ in range(30):
        lengths.saw(2, 0)
    assert lengths.choose() == 0
    while lengths.rest:
        lengths.choose()
    assert lengths.choose() == 2 and lengths.decision["probe"] and lengths.decision["kept"] == 2
    from demo.stepper.decision import decision_sentence
    said = decision_sentence({"decision": lengths.decision}, "English")
    assert said.startswith("Back from a rest: the round drafts 2") and "adds 0.50 of a step" in said


def test_a_fixed_chooser_drafts_its_length_every_round():
    only = fixed_length(2, 3)
    assert [only.choose() for _ in range(5)] == [2] * 5 and only.counts == {2: 5}


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
    if kept == 0:      # the hopeful start unlearnt in about a dozen rounds, then only a probe after each rest drafts
        assert sum(n for m, n in lengths.counts.items() if m) <= 20 and hits == 0


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
        generate_mtp(model, head, ids, 5, k="auto", max_k=5)
    with pytest.raises(ValueError, match="max_k"):
        generate_mtp(model, head, ids, 5, k="auto", max_k=0)
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
            assert len(d["chance"]) == len(d["reach"]) == len(d["pays_above"]) == 3 >= d["kept"]
            assert d["pays_above"][0] == pytest.approx(0.25)           # k = 1's break-even: 1.25 / 1 - 1
            assert all(0 <= r <= p <= 1 for r, p in zip(d["reach"], d["chance"]))


def test_the_length_bench_prints_measured_and_predicted_speedups_and_every_run_identical(capsys):
    from tools import length_bench
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


def test_a_context_too_short_to_time_a_round_is_said_not_crashed():
    from test_mtp import SHAPES
    model, head = random_pair({**SHAPES["small"], "max_position_embeddings": 7}, seed=14)
    with pytest.raises(ValueError, match="too short to time a round"):
        generate_mtp(model, head, torch.tensor([[1, 2]]), 3, k="auto", max_k=3)
    fits = random_pair({**SHAPES["small"], "max_position_embeddings": 12}, seed=14)   # a shorter timing run fits
    assert lengths_for(*fits, 3).max_k == 3
