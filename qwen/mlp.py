"""SwiGLU feed-forward: down(silu(gate(x)) * up(x)), hidden -> intermediate -> hidden."""
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, I = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):                              # (B, T, H) -> (B, T, H)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
