"""Choosing the next token, and plain autoregressive generation.

    probs_from_logits(logits, temperature, top_k, top_p)   the distribution we sample from
    pick_token(logits, ...)                                argmax at temperature 0, else a sample
    coupled_pick(logits, seed, positions, ...)             the sample shared noise makes (Gumbel-max)
    generate_stream(model, ids, ...)                       yields each token as soon as it is decided
    generate(model, ids, ...) -> list[int]                 the same, collected

Randomness is an argument. With `seed`, sampling is coupled: the noise for the token at absolute
position t is a fixed function of (seed, t, token id) (gumbel_noise), and the token is
argmax(log p + G), an exact sample of p (the Gumbel-max rule). Any sampler using the same noise at t
(the MTP head, the verify pass) makes the same choice wherever its distribution puts the same winner,
so speculative sampling with a seed writes exactly what plain sampling with that seed writes. With a
torch.Generator instead, tokens are drawn by torch.multinomial.
"""
import time

import torch

from qwen.cache import State


def filtered_logits(logits, temperature=1.0, top_k=None, top_p=None):
    """logits: (..., V) -> float32 logits / temperature, with the tokens top-k and top-p (nucleus) filter
    out set to -inf: softmax of this is the distribution we sample from."""
    logits = logits.float() / max(float(temperature), 1e-6)
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = logits.topk(int(top_k), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and 0 < top_p < 1:
        sorted_p, order = logits.softmax(-1).sort(-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always at least the most likely token)
        drop_sorted = sorted_p.cumsum(-1) - sorted_p >= top_p
        logits = logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    return logits


def probs_from_logits(logits, temperature=1.0, top_k=None, top_p=None):
    """logits: (..., V) -> probabilities (..., V) after temperature, top-k and top-p (nucleus) filtering."""
    return filtered_logits(logits, temperature, top_k, top_p).softmax(-1)


MASK32 = 0xFFFFFFFF
MIX = 0x45D9F3B          # the hash's multiplier: below 2**31, so no product of 32-bit values overflows int64


def _mix(x):
    """A 32-bit integer hash (two multiply-xorshift rounds) of x < 2**32: a Python int, or an int64
    tensor (changed in place)."""
    if isinstance(x, int):
        for _ in range(2):
            x = ((x ^ (x >> 16)) * MIX) & MASK32
        return x ^ (x >> 16)
    for _ in range(2):
        x = x.bitwise_xor_(x >> 16).mul_(MIX).bitwise_and_(MASK32)
    return x.bitwise_xor_(x >> 16)


def gumbel_noise(seed, positions, tokens, device=None):
    """Gumbel(0, 1) noise (T, V) for the tokens at absolute positions (T,), over token ids `tokens` (an
    int V: every id below it; or a tensor (V,) of ids): a pure function of (seed, position, token id),
    with no generator state, so any pass at any time (plain decoding, the head's guess, the verify pass)
    sees the same noise for the same position and token. seed and positions may be tensors (inside a
    compiled graph) or Python ints (eagerly: their part of the hash is then computed in Python)."""
    if isinstance(seed, torch.Tensor) or isinstance(positions, torch.Tensor):
        positions = torch.as_tensor(positions, dtype=torch.int64, device=device).reshape(-1)
        seed = torch.as_tensor(seed, dtype=torch.int64, device=positions.device)
        base = _mix((positions + _mix(seed & MASK32)) & MASK32)                                       # (T,)
    else:
        base = torch.tensor([_mix((int(p) + _mix(int(seed) & MASK32)) & MASK32) for p in positions],
                            dtype=torch.int64, device=device)
    device = base.device
    tokens = torch.arange(tokens, device=device) if isinstance(tokens, int) else tokens.to(device, torch.int64)
    h = _mix((tokens[None, :] + base[:, None]).bitwise_and_(MASK32))                                # (T, V)
    u = h.double().add_(0.5).mul_(2.0 ** -32)                  # uniform in (0, 1), 32 bits, exact in float64
    return u.log_().neg_().log_().neg_().float()


# The noise lies within about [-3.13, 22.87] (32-bit uniforms), so a token whose score is more than the
# difference below the best score can never win the argmax: only the others need their noise drawn.
NOISE_SPAN = 27.0
DENSE_NOISE = 65536       # up to this many columns, noise is drawn for all of them


def coupled_pick(logits, seed, positions, temperature=1.0, top_k=None, top_p=None, cols=None):
    """The Gumbel-max sample of each row of logits (T, V) at its absolute position (positions: T ints):
    argmax over tokens of filtered_logits + gumbel_noise, exact, drawing noise only where it can matter
    (NOISE_SPAN). cols: the token ids of logits' columns when they are a subset of the vocabulary (a
    draft vocabulary). -> column indices (T,)"""
    scores = filtered_logits(logits, temperature, top_k, top_p)                                   # (T, V)
    if scores.shape[-1] <= DENSE_NOISE:                        # a small vocabulary: every token's noise at once
        return (scores + gumbel_noise(seed, [int(p) for p in torch.as_tensor(positions).reshape(-1)],
                                      scores.shape[-1] if cols is None else cols, logits.device)).argmax(-1)
    picks = []
    for row, position in zip(scores, torch.as_tensor(positions).reshape(-1).tolist()):
        candidates = (row >= row.max() - NOISE_SPAN).nonzero().squeeze(-1)                       # (C,)
        noise = gumbel_noise(seed, [position], candidates if cols is None else cols[candidates])[0]
        picks.append(candidates[(row[candidates] + noise).argmax()])
    return torch.stack(picks)


def pick_token(logits, temperature=0, top_k=None, top_p=None, generator=None, seed=None, position=None, cols=None):
    """logits: (B, V) -> column indices (B,): token ids, unless the columns are the subset `cols` (ids).
    Temperature 0 is argmax (greedy); with a seed, the coupled sample for the token at `position`
    (coupled_pick); else torch.multinomial with `generator`."""
    if not temperature:
        return logits.argmax(-1)
    if seed is not None:
        return coupled_pick(logits, seed, [position] * logits.shape[0], temperature, top_k, top_p, cols)
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
                    generator=None, seed=None, timings=None):
    """Yield new token ids one by one (batch 1). ids: (1, T). Stops after a stop token (yielded) or
    max_new_tokens. Sampling (temperature > 0) is coupled with a seed, else drawn with `generator`.
    timings: a list that receives the seconds of each model pass (the prompt's first), nothing else:
    what a token costs beyond its pass (the pick, the loop) is the caller's time between tokens less these."""
    check_prompt(model, ids)
    max_new_tokens = min(max_new_tokens, model.cfg.max_position_embeddings - ids.shape[1])
    state = State(model, capacity=ids.shape[1] + max_new_tokens)          # allocated once, never grows
    clock = time.perf_counter
    t = clock()
    logits = model(ids, state, last_only=True)[:, -1]                      # (1, V)
    if timings is not None:
        timings.append(clock() - t)
    for i in range(max_new_tokens):
        tok = int(pick_token(logits, temperature, top_k, top_p, generator, seed, ids.shape[1] + i)[0])
        yield tok
        if tok in stop or i == max_new_tokens - 1:
            return
        t = clock()
        logits = model(torch.tensor([[tok]], device=ids.device), state)[:, -1]
        if timings is not None:
            timings.append(clock() - t)


def generate(model, ids, max_new_tokens=100, stop=(), temperature=0, top_k=None, top_p=None, generator=None,
             seed=None):
    """Plain decoding: one forward pass per new token. -> list of new token ids (a stop token included)."""
    return list(generate_stream(model, ids, max_new_tokens, stop, temperature, top_k, top_p, generator, seed))
