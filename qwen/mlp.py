"""SwiGLU feed-forward: down(silu(gate(x)) * up(x)), hidden -> intermediate -> hidden."""
import torch.nn as nn
import torch.nn.functional as F

from qwen.linear import Linear


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, I = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Linear(H, I, bias=False)
        self.up_proj = Linear(H, I, bias=False)
        self.down_proj = Linear(I, H, bias=False)

    def forward(self, x):                              # (B, T, H) -> (B, T, H)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
