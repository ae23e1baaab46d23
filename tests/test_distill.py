"""The head's self-distillation (qwen/train/distill.py): its chained pass is exactly what the head computes when
it drafts from its own output, training moves the head towards the main model, and the command changes the
head's tensors only."""
import json
import os
import shutil

import torch
from safetensors.torch import load_file

from qwen.cache import AttentionState, State
from qwen.config import read_config
from qwen.model import Model
from qwen.mtp import MTP, generate_mtp
from qwen.sample import generate
from qwen.train import distill
from qwen.train.corpus import write_corpus
from qwen.train.loop import adamw
from test_mtp import random_pair

ASSETS = os.path.join(os.path.dirname(__file__), "..", "assets")


def test_the_chained_pass_is_the_head_drafting_from_its_own_output():
    model, head = random_pair("small")
    ids = torch.randint(0, model.cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    hidden = model.hidden(ids, State(model))                                            # (2, 12, H)
    emb = model.embed_tokens(ids)
    first = AttentionState()
    out1 = head(emb[:, 1:], hidden[:, :-1], 0, first)                                 # positions 0..10
    chained = distill.chained_pass(head, emb[:, 2:], out1[:, :-1], first.k[:, :, :10], first.v[:, :, :10])
    for j in range(10):
        # as in a round (mtp.greedy_round): the head cache holds the first pass at 0..j, then the head reads
        # its own output at j and the next token's embedding, at position j+1
        cache = AttentionState()
        own = head(emb[:, 1:j + 2], hidden[:, :j + 1], 0, cache)[:, -1:]                # (2, 1, H)
        torch.testing.assert_close(own, out1[:, j:j + 1], atol=1e-5, rtol=1e-5)
        drafted = head(emb[:, j + 2:j + 3], own, j + 1, cache)                           # (2, 1, H)
        torch.testing.assert_close(chained[:, j], drafted[:, 0], atol=1e-5, rtol=1e-5)
    # and it differs from feeding the main model's hidden state (the first pass), so the check can fail
    assert not torch.allclose(chained[:, 0], head(emb[:, 2:3], hidden[:, 1:2], 1, AttentionState())[:, 0], atol=1e-3)


def test_training_moves_the_head_towards_the_main_model():
    model, head = random_pair("small", seed=1)
    head.train().requires_grad_(True)
    ids = torch.randint(0, model.cfg.vocab_size, (4, 33), generator=torch.Generator().manual_seed(2))
    opt = adamw(list(head.parameters()), 3e-3)
    first = distill.distill_losses(model, head, ids)
    for _ in range(40):
        loss1, loss2, _, _ = distill.distill_losses(model, head, ids)
        opt.zero_grad()
        (loss1 + loss2).backward()
        opt.step()
    last = distill.distill_losses(model, head, ids)
    assert last[0] < 0.7 * first[0] and last[1] < 0.7 * first[1]          # both passes learned
    assert last[2] > first[2] and last[2] > 0.5                           # the first draft agrees more often


def test_the_command_rewrites_only_the_head_and_speculative_decoding_stays_exact(tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(ASSETS, ckpt)
    text = "In the beginning God created the heaven and the earth. " * 40
    write_corpus({"train": [text, text.upper()], "heldout": [text]}, tmp_path / "corpus")
    distill.main(["--corpus", str(tmp_path / "corpus"), "--checkpoint", str(ckpt), "--out", str(tmp_path / "out"),
                  "--work", str(tmp_path / "work"), "--steps", "2", "--batch", "2", "--length", "32",
                  "--eval-every", "1"])
    before, after = load_file(ckpt / "model.safetensors"), load_file(tmp_path / "out" / "model.safetensors")
    assert before.keys() == after.keys()
    for name in before:                   # nothing outside the head changed; every matrix of the head did
        if not name.startswith("mtp."):
            assert torch.equal(before[name], after[name]), name
        elif before[name].dim() == 2:
            assert not torch.equal(before[name], after[name]), name
    record = json.load(open(tmp_path / "out" / "config.json"))["training"]["distill"]
    assert record["steps"] == 2 and [row["step"] for row in record["log"]] == [0, 1, 2]
    assert sorted(os.listdir(tmp_path / "out")) == sorted(os.listdir(ckpt))
    cfg = read_config(str(tmp_path / "out"))
    model = Model.from_pretrained(str(tmp_path / "out"))
    head = MTP.from_pretrained(cfg, str(tmp_path / "out"), lm_head=model.lm_head)
    ids = torch.tensor([[11, 12, 13, 14, 15]])
    plain = generate(model, ids, max_new_tokens=30)
    assert generate_mtp(model, head, ids, max_new_tokens=30, k=2)[0] == plain
