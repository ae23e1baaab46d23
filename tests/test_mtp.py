"""Speculative decoding with the MTP head: exactness against plain decoding, state rollback, sampling."""
import json

import pytest
import torch

from qwen.cache import (State, copy_state, keep_step_states, restore_state, select_step_states, snapshot_state,
                        state_bytes)
from qwen.config import Config
from qwen.model import Model
from qwen.mtp import MTP, accept_drafts, generate_mtp
from qwen.sample import generate
from qwen.scripted import ScriptedHead
from qwen.trace import Trace

SHAPES = {
    "small": dict(vocab_size=61, hidden_size=48, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                  linear_key_head_dim=8, linear_value_head_dim=12, tie_word_embeddings=True),
    "untied_conv3": dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=5,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
                         linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
                         linear_conv_kernel_dim=3, tie_word_embeddings=False,
                         layer_types=["linear_attention", "full_attention"] * 2 + ["linear_attention"]),
}


def random_pair(shape, seed=0):
    """A random model and head; `shape` names an entry of SHAPES or is a config dict."""
    cfg = Config.from_dict(SHAPES[shape] if isinstance(shape, str) else shape)
    torch.manual_seed(seed)
    model, head = Model(cfg).eval(), MTP(cfg).eval()
    with torch.no_grad():
        for p in list(model.parameters()) + list(head.parameters()):
            p.normal_(0, 0.3)
        for layer in model.layers:
            if layer.kind == "linear_attention":
                layer.linear_attn.A_log.uniform_(-1, 1)
    return model.requires_grad_(False), head.requires_grad_(False)


def prompts(vocab, n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (1, int(torch.randint(1, 20, (1,), generator=g))), generator=g) for _ in range(n)]


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("rollback", ["select", "recompute"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_greedy_speculative_equals_plain_with_random_head(shape, rollback, k):
    model, head = random_pair(shape)
    for ids in prompts(model.cfg.vocab_size):
        plain = generate(model, ids, max_new_tokens=25)
        spec, rounds, hits = generate_mtp(model, head, ids, max_new_tokens=25, k=k, rollback=rollback)
        assert spec == plain
        assert 0 <= hits <= rounds * k


@pytest.mark.parametrize("rollback", ["select", "recompute"])
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("hit_rate", [0.5, 0.9, 1.0])
def test_greedy_speculative_equals_plain_when_most_drafts_are_accepted(rollback, k, hit_rate):
    model, head = random_pair("small", seed=1)
    for ids in prompts(model.cfg.vocab_size, n=3, seed=2):
        plain = generate(model, ids, max_new_tokens=30)
        scripted = ScriptedHead(head, ids[0].tolist() + plain, hit_rate)
        spec, rounds, hits = generate_mtp(model, scripted, ids, max_new_tokens=30, k=k, rollback=rollback)
        assert spec == plain
        if hit_rate == 1.0:
            assert hits == rounds * k                                   # every draft of every round accepted


@pytest.mark.parametrize("k", [1, 3])
def test_stop_token_and_max_tokens_end_exactly_like_plain(k):
    model, head = random_pair("small", seed=3)
    ids = prompts(model.cfg.vocab_size, n=1, seed=4)[0]
    plain_long = generate(model, ids, max_new_tokens=40)
    for stop_at in (1, 2, 5, 17):                                   # a stop token at several depths
        stop = (plain_long[stop_at],)
        plain = generate(model, ids, max_new_tokens=40, stop=stop)
        scripted = ScriptedHead(head, ids[0].tolist() + plain_long, 1.0)
        spec, _, _ = generate_mtp(model, scripted, ids, max_new_tokens=40, stop=stop, k=k)
        assert spec == plain and spec[-1] in stop
    for budget in (1, 2, 3, 7):
        scripted = ScriptedHead(head, ids[0].tolist() + plain_long, 1.0)
        assert generate_mtp(model, scripted, ids, max_new_tokens=budget, k=k)[0] == plain_long[:budget]


def plain_state_after(model, tokens):
    state = State(model)
    model(torch.tensor([tokens[:-1]]), state)
    model(torch.tensor([tokens[-1:]]), state)
    return state


def test_select_and_restore_leave_the_state_plain_decoding_has():
    model, _ = random_pair("small", seed=5)
    prefix, more = [3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5]
    for rollback in ("select", "recompute"):
        state = verify_then_roll_back(model, prefix, more, 2, rollback)   # verify 4 tokens; keep only the first 2
        want = State(model)
        model(torch.tensor([prefix + more[:2]]), want)
        assert_same_state(state, want)


@torch.inference_mode()
def test_a_pass_keeping_step_states_writes_no_memory_and_select_writes_the_kept_rows_bit_for_bit():
    """select's one memory: a keeping pass leaves S as it was; applying the first n kept writes gives, bit for bit,
    the memory the same pass computes for its n-th row, and all of them the memory a pass writing as it goes
    leaves. The compiled round's form (n as a tensor, every slot written, those past n as nothing) agrees."""
    from qwen.cache import take_step_states
    model, _ = random_pair("small", seed=5)
    state = State(model)
    model(torch.tensor([[3, 1, 4, 1, 5, 9, 2]]), state)
    layers = state.deltanet_layers()
    before = [s.S.clone() for s in layers]
    twin = copy_state(state)
    keep_step_states(state, 4)
    model(torch.tensor([[6, 5, 3, 5]]), state)
    model(torch.tensor([[6, 5, 3, 5]]), twin)                     # the same pass, writing as it goes
    assert all(torch.equal(s.S, b) for s, b in zip(layers, before))
    for s, t in zip(layers, twin.deltanet_layers()):
        assert torch.equal(s.written(range(4)), t.S)
        after = s.memories((-1, 0, 1, 2))                         # (rows, B, heads, Dk, Dv)
        assert not torch.equal(after[1], after[3])
        for n in range(4):
            assert torch.equal(after[n], s.written(range(n + 1)))
    for n in range(4):
        for rows in (torch.tensor([n]), list(range(n + 1))):      # the compiled round's form, the step-by-step's
            trial = copy_state(state)
            take_step_states(trial, rows, of=4)
            for s, t in zip(trial.deltanet_layers(), layers):
                assert torch.equal(s.S, t.written(range(n + 1))) and torch.equal(s.conv, t.conv_steps[n])


@torch.inference_mode()
def verify_then_roll_back(model, prefix, more, n, rollback):
    """The state after prefix, a verify pass over `more`, and a rollback to its first n tokens."""
    state = State(model)
    model(torch.tensor([prefix]), state)
    start, snap = state.pos, snapshot_state(state)
    if rollback == "select":
        keep_step_states(state, len(more))
    model(torch.tensor([more]), state)
    if rollback == "select":
        select_step_states(state, start, n)
    else:
        restore_state(state, snap)
        model(torch.tensor([more[:n]]), state)
    return state


def assert_same_state(got, want, atol=1e-5):
    """Same position, same valid KV columns, same conv windows and memories."""
    assert got.pos == want.pos
    for a, b in zip(got.attention_layers(), want.attention_layers()):
        assert a.length() == b.length() == want.pos
        for x, y in zip(a.valid(), b.valid()):
            assert x.shape == y.shape and torch.allclose(x, y, atol=atol)
    for a, b in zip(got.deltanet_layers(), want.deltanet_layers()):
        assert torch.allclose(a.conv, b.conv, atol=atol) and torch.allclose(a.S, b.S, atol=atol)


def test_restore_brings_back_exactly_the_snapshot_and_memory_does_not_grow():
    model, _ = random_pair("small", seed=6)
    state = State(model)
    model(torch.tensor([[1, 2, 3, 4, 5]]), state)
    snap = snapshot_state(state)
    copies = [(s.conv.clone(), s.S.clone()) for s in state.deltanet_layers()]
    size = state_bytes(state)
    for _ in range(5):                                           # five rejected rounds
        model(torch.tensor([[7, 8, 9]]), state)
        restore_state(state, snap)
        assert state_bytes(state) == size
    for s, (conv, S) in zip(state.deltanet_layers(), copies):
        assert torch.equal(s.conv, conv) and torch.equal(s.S, S)


def test_skipping_the_restore_changes_the_output():
    model, head = random_pair("small", seed=7)
    differs = 0
    for ids in prompts(model.cfg.vocab_size, n=4, seed=8):
        plain = generate(model, ids, max_new_tokens=30)
        wrong, _, _ = generate_mtp(model, head, ids, max_new_tokens=30, rollback="none")
        differs += wrong != plain
    assert differs >= 2


def test_trace_records_concatenate_to_the_output_and_are_json():
    model, head = random_pair("small", seed=9)
    ids = prompts(model.cfg.vocab_size, n=1)[0]
    plain = generate(model, ids, max_new_tokens=20)
    for k, rate in ((1, 0.7), (3, 0.7)):
        trace = Trace()
        scripted = ScriptedHead(head, ids[0].tolist() + plain, rate)
        out, rounds, hits = generate_mtp(model, scripted, ids, max_new_tokens=20, k=k, trace=trace)
        json.dumps(trace)
        assert [e["token"] for r in trace for e in r["emitted"]] == out
        assert len(trace) == rounds + 1 and trace[0]["kind"] == "prefill"
        assert sum(r["accepted"] for r in trace[1:]) == hits
        for r in trace[1:]:
            assert len(r["draft"]) == k and len(r["verify"]) == k + 1
            assert r["states"]["after"]["pos"] == r["pos"] + r["accepted"] + 1


def test_accept_drafts_greedy_rule():
    logits = torch.tensor([[0., 5, 0], [0, 0, 5], [5, 0, 0]])        # main model says 1, 2, 0
    assert accept_drafts(logits, [1, 2], None)[:2] == (2, 0)          # both accepted, bonus 0
    assert accept_drafts(logits, [1, 0], None)[:2] == (1, 2)          # second rejected, correction 2
    assert accept_drafts(logits, [2, 2], None)[:2] == (0, 1)


def emitted_pairs(p, q, n, seed=0):
    """Run accept_drafts n times with k = 2 drafts drawn from q (2, V) against the main model's p (3, V);
    -> the frequencies of the first two emitted tokens, {(a, b): share}."""
    g = torch.Generator().manual_seed(seed)
    logits = p.log()                                              # temperature 1 turns these back into p
    counts = {}
    for _ in range(n):
        drafts = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(2)]
        accepted, nxt, _ = accept_drafts(logits, drafts, q, temperature=1.0, generator=g)
        pair = tuple((drafts[:accepted] + [nxt])[:2]) if accepted < 2 else tuple(drafts)
        if len(pair) == 1:                                        # rejected at once: the second token is
            pair = (pair[0], int(torch.multinomial(p[1], 1, generator=g)))   # the next round's, drawn from p
        counts[pair] = counts.get(pair, 0) + 1
    return {key: c / n for key, c in counts.items()}


def test_speculative_sampling_keeps_the_main_models_distribution():
    # The rule, checked where the answer is known by hand: with the main model's rows p fixed, the
    # first two emitted tokens must be distributed as p[0](a) * p[1](b), whatever the head's q is.
    # Breaking the rule (resampling a rejection from p instead of max(p - q, 0)) gives a distance of
    # 0.15 here; sampling noise at n = 8000 is about 0.02.
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.05, 0.15, 0.3, 0.5], [0.7, 0.1, 0.1, 0.1]])                  # a head that guesses badly
    seen = emitted_pairs(p, q, 8000)
    tv = 0.5 * sum(abs(seen.get((a, b), 0.0) - float(p[0, a] * p[1, b])) for a in range(4) for b in range(4))
    assert tv < 0.05, (tv, seen)
    # and the emitted first token is p[0] even when the head is certain of a token p rarely picks
    certain = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.25] * 4])
    firsts = {}
    for (a, _), share in emitted_pairs(p, certain, 8000, seed=1).items():
        firsts[a] = firsts.get(a, 0.0) + share
    assert max(abs(firsts.get(a, 0.0) - float(p[0, a])) for a in range(4)) < 0.03, firsts


@pytest.mark.parametrize("rollback", ["select", "recompute"])
def test_a_draft_vocabulary_subset_leaves_the_output_unchanged(rollback):
    from qwen.mtp import frequency_ranked_vocab
    model, head = random_pair("small", seed=12)
    texts = [p[0].tolist() + generate(model, p, max_new_tokens=20) for p in prompts(model.cfg.vocab_size, seed=13)]
    vocab = frequency_ranked_vocab(texts, model.cfg.vocab_size, size=12)
    assert len(vocab) == 12
    head.set_draft_vocab(vocab, model.lm_head)
    try:
        for ids in prompts(model.cfg.vocab_size, n=3, seed=14):
            plain = generate(model, ids, max_new_tokens=25)
            trace = Trace()
            spec, rounds, hits = generate_mtp(model, head, ids, max_new_tokens=25, k=2, rollback=rollback,
                                              trace=trace)
            assert spec == plain
            assert all(d["token"] in vocab for r in trace[1:] for d in r["draft"])   # drafts stay in the subset
    finally:
        head.set_draft_vocab(None, model.lm_head)


@pytest.mark.parametrize("speculative", [False, True])
def test_memory_does_not_grow_during_a_512_token_generation(monkeypatch, speculative):
    """Every state buffer is allocated at the first pass and only written in place afterwards."""
    model, head = random_pair("small", seed=9)
    model.cfg.max_position_embeddings = 4096
    seen = []
    original = State.end_pass

    def watch(state, T):                                    # after every pass: which buffers, how big
        original(state, T)
        seen.append([(t.data_ptr(), t.nbytes) for s in state.layers
                     for t in (getattr(s, name, None) for name in ("k", "v", "conv", "S", "conv_steps", "row_decay", "row_k", "row_delta"))
                     if t is not None])
    monkeypatch.setattr(State, "end_pass", watch)
    ids = torch.tensor([[1, 2, 3]])
    if speculative:
        generate_mtp(model, head, ids, max_new_tokens=512, k=2)
    else:
        generate(model, ids, max_new_tokens=512)
    assert len(seen) > 100 and all(buffers == seen[0] for buffers in seen)
