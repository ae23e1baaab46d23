"""Sampling coupled by shared noise (qwen.sample.gumbel_noise, coupled_pick): an exact sampler, noise that
depends on (seed, position, token) alone, and speculative sampling token-identical to plain sampling
with the same seed, checked against torch.multinomial, plain decoding and the acceptance bound of
Daliri, Musco and Suresh (arXiv 2408.07978)."""
import math

import pytest
import torch

from qwen.model import Model
from qwen.mtp import MTP, accept_drafts, generate_mtp
from qwen.sample import (NOISE_SPAN, coupled_pick, filtered_logits, generate, gumbel_noise, probs_from_logits)
from qwen.weights import find_model
from test_mtp import prompts, random_pair


def test_the_noise_is_a_function_of_seed_position_and_token_alone():
    a = gumbel_noise(7, [3, 4], 50)
    assert torch.equal(a, gumbel_noise(7, [3, 4], 50))                         # no hidden state
    assert torch.equal(a[1], gumbel_noise(7, [4], 50)[0])                      # a position alone
    assert torch.equal(a[:, [5, 9, 2]], gumbel_noise(7, [3, 4], torch.tensor([5, 9, 2])))   # a token alone
    assert not torch.equal(a[0], a[1])                                          # another position: other noise
    assert not torch.equal(a, gumbel_noise(8, [3, 4], 50))                      # another seed: other noise
    assert (a[0] != a[0, :1]).sum() == 49                                       # every token its own value
    assert torch.equal(a, gumbel_noise(torch.tensor(7), torch.tensor([3, 4]), 50))   # as a graph computes it


def test_the_noise_is_standard_gumbel():
    g = gumbel_noise(1, torch.arange(200), 2000).double()                      # 400k values
    assert abs(g.mean() - 0.5772157) < 0.01 and abs(g.std() - math.pi / math.sqrt(6)) < 0.01
    assert -3.2 < g.min() and g.max() < 23.0 and 23.0 + 3.2 < NOISE_SPAN      # within the span the pick relies on
    u = torch.exp(-torch.exp(-g))                                               # back to uniforms
    counts = torch.histc(u, bins=10, min=0, max=1)
    assert (counts / u.numel() - 0.1).abs().max() < 0.005


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, None, None), (0.6, None, None), (1.3, 4, None),
                                                       (0.9, None, 0.7), (0.7, 6, 0.9)])
def test_the_coupled_sample_has_the_distribution_plain_sampling_has(temperature, top_k, top_p):
    """Over 4000 seeds (and as many positions), token frequencies match probs_from_logits as closely as
    torch.multinomial's own frequencies of the same size do (both within 4.5 sigma); filtered tokens never
    appear."""
    torch.manual_seed(0)
    logits = torch.randn(1, 10) * 1.5
    p = probs_from_logits(logits[0], temperature, top_k, top_p)
    n = 4000
    picks = torch.cat([coupled_pick(logits, seed, [seed % 97], temperature, top_k, top_p) for seed in range(n)])
    freq = torch.bincount(picks, minlength=10).double() / n
    sigma = (p * (1 - p) / n).sqrt().double() + 1e-12
    assert ((freq - p) / sigma).abs().max() < 4.5, (freq, p)
    assert (freq[p == 0] == 0).all()
    ref = torch.bincount(torch.multinomial(p, n, replacement=True, generator=torch.Generator().manual_seed(1)),
                         minlength=10).double() / n
    assert ((ref - p) / sigma).abs().max() < 4.5          # the yardstick: multinomial's deviation


def test_drawing_noise_only_near_the_best_score_changes_no_pick():
    """coupled_pick skips tokens more than NOISE_SPAN below the best score: the full argmax agrees."""
    torch.manual_seed(1)
    logits = torch.randn(300, 500) * 12                                         # wide: many tokens skipped
    positions = torch.arange(300) + 1000
    full = (filtered_logits(logits, 1.0) + gumbel_noise(3, positions, 500)).argmax(-1)
    assert torch.equal(coupled_pick(logits, 3, positions, 1.0), full)
    cols = torch.arange(0, 1000, 2)                                             # a draft vocabulary: ids 0, 2, 4...
    full_cols = (logits + gumbel_noise(3, positions, cols)).argmax(-1)
    assert torch.equal(coupled_pick(logits, 3, positions, 1.0, cols=cols), full_cols)


def test_a_draft_is_accepted_at_least_as_often_as_the_coupling_bound():
    """For fixed p and q, a draft argmax(log q + G) equals the main model's argmax(log p + G) with
    probability at least (1 - TV) / (1 + TV) (Daliri, Musco and Suresh). Measured over 20000 positions."""
    torch.manual_seed(2)
    for _ in range(4):
        lp, lq = torch.randn(1, 8) * 1.2, torch.randn(1, 8) * 1.2
        tv = 0.5 * float((lp.softmax(-1) - lq.softmax(-1)).abs().sum())
        n = 20000
        pos = torch.arange(n)
        g = gumbel_noise(11, pos, 8)
        same = ((lp + g).argmax(-1) == (lq + g).argmax(-1)).double().mean()
        bound = (1 - tv) / (1 + tv)
        assert same >= bound - 4 * math.sqrt(bound * (1 - bound) / n), (float(same), bound, tv)
        assert same <= 1 - tv + 4 * math.sqrt(0.25 / n)                  # and never above the best coupling


def test_the_coupled_rule_keeps_drafts_while_they_equal_the_main_models_pick():
    logits = torch.tensor([[9.0, 0.0, 0.0], [0.0, 9.0, 0.0], [0.0, 0.0, 9.0]])     # near-certain picks 0, 1, 2
    picks = coupled_pick(logits, 5, [10, 11, 12], 0.5).tolist()
    assert picks == [0, 1, 2]
    assert accept_drafts(logits, [0, 1], None, 0.5, seed=5, start=10)[:2] == (2, 2)    # both kept, bonus 2
    assert accept_drafts(logits, [0, 2], None, 0.5, seed=5, start=10)[:2] == (1, 1)    # d2 differs: correction 1
    assert accept_drafts(logits, [1, 1], None, 0.5, seed=5, start=10)[:2] == (0, 0)


GRID = [(0.3, None, None), (0.7, None, None), (1.2, None, None), (0.8, 8, None), (0.9, None, 0.8), (1.0, 10, 0.9)]


@pytest.mark.parametrize("shape", ["small", "untied_conv3"])
def test_speculative_sampling_with_a_seed_writes_what_plain_sampling_writes(shape):
    """0 mismatches over k 1-4, both rollbacks, the temperatures and filters of GRID, a seed each."""
    model, head = random_pair(shape, seed=21)
    mismatches, runs = [], 0
    ids = prompts(model.cfg.vocab_size, n=1, seed=22)[0]
    for seed, (temperature, top_k, top_p) in enumerate(GRID):
        sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        want = generate(model, ids, 24, **sampling)
        for k in (1, 2, 3, 4):
            for rollback in ("select", "recompute"):
                runs += 1
                got = generate_mtp(model, head, ids, 24, k=k, rollback=rollback, **sampling)[0]
                if got != want:
                    mismatches.append((temperature, top_k, top_p, seed, k, rollback))
    assert runs == len(GRID) * 8 and mismatches == []


def test_a_seed_makes_sampling_reproducible_and_another_seed_changes_it():
    model, _ = random_pair("small", seed=23)
    ids = prompts(model.cfg.vocab_size, n=1, seed=24)[0]
    a = generate(model, ids, 30, temperature=1.0, seed=1)
    assert a == generate(model, ids, 30, temperature=1.0, seed=1)
    assert a != generate(model, ids, 30, temperature=1.0, seed=2)
    assert a != generate(model, ids, 30)                                         # not greedy


def test_the_embedded_model_samples_the_same_tokens_speculatively_with_its_draft_vocabulary():
    """The real head, guessing over its FR-Spec subset with the same noise per token id."""
    path = find_model()
    model = Model.from_pretrained(path)
    head = MTP.from_pretrained(model.cfg, path, lm_head=model.lm_head)
    assert head.draft_vocab is not None
    ids = torch.tensor([[785, 279, 1156, 11, 2201, 3, 9, 1024]]) % model.cfg.vocab_size
    hits = 0
    for temperature, top_k, top_p in [(0.7, None, None), (1.0, 40, 0.95)]:
        for seed in (0, 1):
            sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
            want = generate(model, ids, 40, **sampling)
            for k, rollback in ((1, "select"), (2, "recompute"), (3, "select")):
                got, _, h = generate_mtp(model, head, ids, 40, k=k, rollback=rollback, **sampling)
                assert got == want, (sampling, k, rollback)
                hits += h
    assert hits > 40                                                             # the trained head is often right
