"""Test helpers for the step-through view: tiny models with known behaviour and a stand-in tokenizer.

    counting_model()  -> (model, mtp): greedy output counts up (t, t+1, t+2, ...) and the head always
                         guesses right, so every round accepts all k drafts and earns a bonus token
    random_model()    -> (model, mtp): every weight random (norms too), so most drafts are rejected
    FakeChat()        -> what record_run needs from qwen.chat.Chat: stop, decode, tk.id_to_token
"""
import torch

from qwen.config import Config
from qwen.model import Model
from qwen.mtp import MTP

TINY = dict(vocab_size=64, hidden_size=48, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2,
            linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4, tie_word_embeddings=False,
            max_position_embeddings=1024)


def tiny_config(**overrides):
    return Config.from_dict({**TINY, **overrides})


def random_model(seed=0, **overrides):
    cfg = tiny_config(**overrides)
    torch.manual_seed(seed)
    model, mtp = Model(cfg), MTP(cfg)
    with torch.no_grad():
        for p in list(model.parameters()) + list(mtp.parameters()):
            p.normal_(0, 0.3)
    return model.eval().requires_grad_(False), mtp.eval().requires_grad_(False)


@torch.no_grad()
def counting_model(seed=0):
    """Every layer's output projection is zero, so the residual stream is the token's embedding and the
    main model's logits are lm_head · e_x; lm_head row y holds e_(y-1), so the argmax is x + 1. The
    head's fc passes the next token's embedding straight through, so it guesses (t+1) + 1: always right.
    The DeltaNet memories and KV caches are still written as usual."""
    model, mtp = random_model(seed)
    cfg = model.cfg
    model.embed_tokens.weight.normal_(0, 1.0)
    for module in (model, mtp):
        for name, p in module.named_parameters():
            if name.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight")):
                p.zero_()
            elif "norm" in name and "linear_attn.norm" not in name:
                p.zero_()                                    # RMSNorm scales by (1 + weight) = 1
    model.lm_head.weight.copy_(torch.roll(model.embed_tokens.weight, 1, dims=0))    # row y = e_(y-1)
    H = cfg.hidden_size
    mtp.fc.weight.zero_()
    mtp.fc.weight[:, :H] = torch.eye(H)                      # keep the embedding half, drop the hidden half
    return model, mtp


class _Tokens:
    def id_to_token(self, i):
        return f"t{i}"


class FakeChat:
    """Token i reads as "t<i> " (special ids read as "<stop>")."""

    def __init__(self, stop=()):
        self.stop = tuple(stop)
        self.tk = _Tokens()

    def decode(self, ids):
        return "".join("<stop>" if i in self.stop else f"t{i} " for i in ids)
