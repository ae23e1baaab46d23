"""Rotary position embedding on part of each attention head.

Qwen3.5 rotates only the first `rotary_dim = head_dim * partial_rotary_factor` numbers of each query
and key head (64 of 256 for the 0.8B model) and leaves the rest untouched. Pairs are (i, i + rotary_dim/2)
("rotate half"), with frequencies theta^(-2i/rotary_dim).

The reference computes an "interleaved multimodal" rope with three position rows (time, height,
width) for images; for text all three rows are the same position, so it reduces to this plain rope.
"""
import torch


def rope_tables(cfg, positions):
    """cos, sin for integer positions. positions: (T,) or (B, T) -> each (..., T, rotary_dim), float32"""
    d = cfg.rotary_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=positions.device) / d))
    angles = positions.float()[..., None] * inv_freq      # (..., T, d/2)
    angles = torch.cat([angles, angles], dim=-1)          # (..., T, d): both halves of a pair share an angle
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate the first rotary_dim numbers of each head. x: (B, heads, T, head_dim); cos/sin (T, d) or (B, T, d)"""
    if cos.dim() == 3:                                     # per-row positions (left-padded batch)
        cos, sin = cos[:, None], sin[:, None]
    d = cos.shape[-1]
    rot, keep = x[..., :d], x[..., d:]
    half = d // 2
    rotated_half = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    rot = (rot.float() * cos + rotated_half.float() * sin).to(x.dtype)
    return torch.cat([rot, keep], dim=-1)
