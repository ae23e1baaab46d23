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


def test_its_draft_vocabulary_keeps_the_output_and_nearly_all_the_acceptance(embedded):
    """assets/draft_vocab.json (FR-Spec): the 2048 most frequent tokens of the training corpus and the
    stop tokens. Drafts then come only from that list; the output must not change, and a list of
    frequent tokens keeps most of the full-vocabulary head's acceptance (a list of rare ones would not)."""
    model, full, chat = embedded
    head = MTP.from_pretrained(model.cfg, find_model(ASSETS), lm_head=model.lm_head)
    ids = head.draft_vocab.tolist()
    assert len(ids) == 2049 and ids == sorted(set(ids)) and ids[-1] < model.cfg.vocab_size
    assert set(chat.stop) <= set(ids)
    assert full.draft_vocab is None                              # without lm_head: every token, as before
    for prompt in PROMPTS[:3]:
        ids_ = chat.encode(prompt)
        plain = generate(model, ids_, max_new_tokens=40, stop=chat.stop)
        for k, rollback in ((2, "select"), (2, "recompute")):
            assert generate_mtp(model, head, ids_, 40, chat.stop, k=k, rollback=rollback)[0] == plain
    subset, every = acceptance(model, head, chat), acceptance(model, full, chat)
    assert subset >= 0.9 * every, (subset, every)
    rare = MTP.from_pretrained(model.cfg, find_model(ASSETS))
    rare.set_draft_vocab(list(range(model.cfg.vocab_size - 2049, model.cfg.vocab_size)), model.lm_head)
    assert acceptance(model, rare, chat) < 0.5 * every


def test_the_command_line_prints_the_host_plan_and_the_text_plain_decoding_writes(embedded, capsys):
    """`python -m qwen --temperature 0` on the embedded model, eager: the plan line first (device, dtype,
    strategy, threads, why), then the completion, speculative or not, equal to plain greedy decoding's."""
    from qwen.__main__ import main
    model, head, chat = embedded
    prompt = "The LORD is my shepherd;"
    want = chat.decode(generate(model, chat.encode(prompt), max_new_tokens=12))
    for extra in ([], ["--mtp", "2"]):
        main([prompt, "--no-compile", "--max-new-tokens", "12", "--temperature", "0", *extra])
        out, err = capsys.readouterr()
        threads = torch.get_num_threads()
        assert err.splitlines()[0] == (f"[cpu · float32 · eager · {threads} thread{'s' if threads != 1 else ''}: "
                                       "float32: a small model (hidden size 192) on CPU; compiling not asked for]")
        assert out.startswith(want) and "12 tokens" in out


def test_the_command_line_samples_as_the_page_races_by_default(embedded, capsys):
    """Without --temperature, `python -m qwen` samples at the page's temperature with seed 0 and shared
    noise: plain sampling's text, with --mtp too, and not the greedy loop."""
    from demo.choices import PAGE_TEMPERATURE
    from qwen.__main__ import TEMPERATURE, main
    model, _, chat = embedded
    prompt = "The LORD is my shepherd;"
    ids = chat.encode(prompt)
    sampled = chat.decode(generate(model, ids, max_new_tokens=24, temperature=PAGE_TEMPERATURE, seed=0))
    assert TEMPERATURE == PAGE_TEMPERATURE and sampled != chat.decode(generate(model, ids, max_new_tokens=24))
    for extra in ([], ["--mtp", "2"]):
        main([prompt, "--no-compile", "--max-new-tokens", "24", *extra])
        assert capsys.readouterr().out.startswith(sampled)
