"""The embedded demo checkpoint under assets/: a real Qwen3.5 checkpoint with a head that predicts."""
import os

import pytest
import torch

from qwen.cache import State
from qwen.chat import Chat
from qwen.model import Model
from qwen.mtp import MTP, generate_mtp
from qwen.sample import generate
from qwen.weights import find_model

ASSETS = os.path.join(os.path.dirname(__file__), "..", "assets")
PROMPTS = [":class:`Decimal` objects", "And the LORD said unto Moses,", "春风", "The :mod:`os` module provides"]


@pytest.fixture(scope="module")
def embedded():
    path = find_model(ASSETS)
    model = Model.from_pretrained(path)
    return model, MTP.from_pretrained(model.cfg, path), Chat(model, path)


def test_every_file_fits_spaces_without_lfs():
    for name in os.listdir(ASSETS):
        assert os.path.getsize(os.path.join(ASSETS, name)) <= 10_000_000, name


def test_the_reference_implementation_loads_it_and_agrees(embedded):
    from transformers import AutoModelForCausalLM
    model, _, chat = embedded
    ref = AutoModelForCausalLM.from_pretrained(ASSETS, dtype=torch.float32).eval()
    ids = chat.encode("The :mod:`json` module exposes an API familiar to users of the standard library")
    with torch.no_grad():
        want, got = ref(ids).logits, model(ids, State(model))
    assert ((got - want).abs().max() / want.abs().max()).item() <= 1e-4


def test_speculative_equals_plain_greedy_on_the_embedded_model(embedded):
    model, head, chat = embedded
    for prompt in PROMPTS[:3]:
        ids = chat.encode(prompt)
        plain = generate(model, ids, max_new_tokens=40, stop=chat.stop)
        for k, rollback in ((1, "select"), (2, "recompute"), (3, "select")):
            assert generate_mtp(model, head, ids, 40, chat.stop, k=k, rollback=rollback)[0] == plain


def acceptance(model, head, chat):
    rounds = hits = 0
    for prompt in PROMPTS:
        _, r, h = generate_mtp(model, head, chat.encode(prompt), 48, chat.stop, k=1)
        rounds, hits = rounds + r, hits + h
    return hits / rounds


def test_the_trained_head_is_accepted_far_more_often_than_a_random_one(embedded):
    model, head, chat = embedded
    torch.manual_seed(0)
    random_head = MTP(model.cfg).eval().requires_grad_(False)
    trained, untrained = acceptance(model, head, chat), acceptance(model, random_head, chat)
    assert trained >= 0.6 and trained > untrained + 0.4, (trained, untrained)
