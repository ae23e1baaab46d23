"""The training loop on a tiny random config: both losses go down and the exported checkpoint reloads exactly."""
import os

import torch

from qwen.cache import AttentionState, State
from qwen.chat import Chat
from qwen.model import Model
from qwen.mtp import MTP
from qwen.train.export import export_checkpoint
from qwen.train.loop import demo_config, init_weights, main_and_mtp_losses

ASSETS = os.path.join(os.path.dirname(__file__), "..", "assets")


def test_a_few_training_steps_lower_both_losses_and_the_export_reloads_identically(tmp_path):
    torch.manual_seed(0)
    cfg = demo_config(vocab_size=Chat(None, ASSETS).tk.get_vocab_size(), hidden_size=32, intermediate_size=48,
                      num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                      linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=8,
                      linear_value_head_dim=8)
    g = torch.Generator().manual_seed(0)
    model, head = Model(cfg), MTP(cfg)
    init_weights(model, cfg.num_hidden_layers, g)
    init_weights(head, cfg.num_hidden_layers, g)
    params = list({id(p): p for p in list(model.parameters()) + list(head.parameters())}.values())
    opt = torch.optim.AdamW(params, lr=1e-2)
    batch = torch.randint(0, 50, (4, 33), generator=g)           # a small repeated batch: it must be learnt
    first = None
    for _ in range(25):
        main, draft = main_and_mtp_losses(model, head, batch)
        first = first or (main.item(), draft.item())
        opt.zero_grad()
        (main + 0.5 * draft).backward()
        opt.step()
    assert main.item() < first[0] - 0.5 and draft.item() < first[1] - 0.5

    model.eval(); head.eval()
    with torch.no_grad():                                        # bfloat16 on disk: compare with rounded weights
        for p in params:
            p.copy_(p.to(torch.bfloat16).float())
    export_checkpoint(model, head, ASSETS, str(tmp_path / "ck"), {"steps": 25})
    again = Model.from_pretrained(str(tmp_path / "ck"))
    again_head = MTP.from_pretrained(again.cfg, str(tmp_path / "ck"))
    ids = batch[:1, :20]
    with torch.no_grad():
        assert torch.equal(model(ids, State(model)), again(ids, State(again)))
        h = model.hidden(ids, State(model))
        emb = model.embed_tokens(ids)
        assert torch.equal(head(emb, h, 0, AttentionState()), again_head(emb, h, 0, AttentionState()))
