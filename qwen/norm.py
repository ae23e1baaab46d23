"""RMS normalisation, in the two flavours Qwen3.5 uses.

- `RMSNorm` (every norm of the main stack, the q/k norms, the MTP head): x / rms(x) * (1 + weight).
  The weight is stored centred at 0, so a freshly initialised layer is the identity scale.
- `GatedRMSNorm` (inside DeltaNet, per value head): x / rms(x) * weight * silu(gate).

Both normalise in float32 and cast back, as the reference does.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def rms_normalize(x, eps):
    """x / sqrt(mean(x^2) + eps) over the last dim, computed in float32. (..., D) -> (..., D) float32"""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return (rms_normalize(x, self.eps) * (1.0 + self.weight.float())).type_as(x)


class GatedRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, gate):
        # subtle: the reference casts back to x's dtype *before* scaling by weight, then gates in float32
        y = self.weight * rms_normalize(x, self.eps).to(x.dtype)
        return (y * F.silu(gate.float())).to(x.dtype)
