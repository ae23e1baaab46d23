"""One decoder layer: pre-norm token mixer (DeltaNet or gated attention) then pre-norm SwiGLU, each residual.

    x = x + mixer(input_layernorm(x))
    x = x + mlp(post_attention_layernorm(x))
"""
import torch.nn as nn

from qwen.attention import Attention
from qwen.deltanet import GatedDeltaNet
from qwen.mlp import MLP
from qwen.norm import RMSNorm


class DecoderLayer(nn.Module):
    def __init__(self, cfg, kind):
        super().__init__()
        self.kind = kind                                      # "linear_attention" or "full_attention"
        if kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(cfg)             # attribute names equal checkpoint keys
        else:
            self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, cache, positions, pad=None, real=None, tree=None):
        """x: (B, T, H) at positions (T,) -> (B, T, H); cache: this layer's AttentionState or DeltaNetState,
        written in place; tree: the rows' qwen.tree.Tree, or None for a sequence."""
        h = self.input_layernorm(x)
        if self.kind == "linear_attention":
            h = self.linear_attn(h, cache, real, tree)
        else:
            h = self.self_attn(h, cos, sin, cache, positions, pad, tree)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x))
