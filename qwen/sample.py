"""Choosing the next token, and plain autoregressive generation.

    probs_from_logits(logits, temperature, top_k, top_p)   the distribution we sample from
    pick_token(logits, ...)                                argmax at temperature 0, else a sample
    generate_stream(model, ids, ...)                       yields each token as soon as it is decided
    generate(model, ids, ...) -> list[int]                 the same, collected

Randomness is an argument: pass a torch.Generator to make sampling reproducible.
"""
import torch

from qwen.cache import State


def probs_from_logits(logits, temperature=1.0, top_k=None, top_p=None):
    """logits: (..., V) -> probabilities (..., V) after temperature, top-k and top-p (nucleus) filtering."""
    logits = logits.float() / max(float(temperature), 1e-6)
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = logits.topk(int(top_k), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if top_p is not None and 0 < top_p < 1:
        sorted_p, order = probs.sort(-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always at least the most likely token)
        drop_sorted = sorted_p.cumsum(-1) - sorted_p >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def pick_token(logits, temperature=0, top_k=None, top_p=None, generator=None):
    """logits: (B, V) -> token ids (B,). Temperature 0 is argmax (greedy)."""
    if not temperature:
        return logits.argmax(-1)
    probs = probs_from_logits(logits, temperature, top_k, top_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def check_prompt(model, ids):
    """Refuse what the model cannot run: an empty prompt, or one longer than its context."""
    if ids.dim() != 2 or ids.shape[1] == 0:
        raise ValueError("empty prompt: give at least one token")
    limit = model.cfg.max_position_embeddings
    if ids.shape[1] >= limit:
        raise ValueError(f"prompt of {ids.shape[1]} tokens does not fit the model's context of {limit}")


@torch.inference_mode()
def generate_stream(model, ids, max_new_tokens=100, stop=(), temperature=0, top_k=None, top_p=None,
                    generator=None):
    """Yield new token ids one by one (batch 1). ids: (1, T). Stops after a stop token (yielded) or max_new_tokens."""
    check_prompt(model, ids)
    max_new_tokens = min(max_new_tokens, model.cfg.max_position_embeddings - ids.shape[1])
    state = State(model, capacity=ids.shape[1] + max_new_tokens)          # allocated once, never grows
    logits = model(ids, state, last_only=True)[:, -1]                      # (1, V)
    for i in range(max_new_tokens):
        tok = int(pick_token(logits, temperature, top_k, top_p, generator)[0])
        yield tok
        if tok in stop or i == max_new_tokens - 1:
            return
        logits = model(torch.tensor([[tok]], device=ids.device), state)[:, -1]


def generate(model, ids, max_new_tokens=100, stop=(), temperature=0, top_k=None, top_p=None, generator=None):
    """Plain decoding: one forward pass per new token. -> list of new token ids (a stop token included)."""
    return list(generate_stream(model, ids, max_new_tokens, stop, temperature, top_k, top_p, generator))
