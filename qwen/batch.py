"""Several prompts of different lengths generated at once, left-padded to a common length.

    prompts  [[5, 6, 7], [8, 9]]  ->  ids [[5, 6, 7], [PAD, 8, 9]], state.pad = [0, 1]

Padding must be invisible: attention masks padded keys (attention.attention_mask), DeltaNet zeroes
padded inputs so they write nothing into the memory or conv window, and rotary positions count from
each row's first real token. So each row's output equals generating that prompt alone.
"""
import torch

from qwen.cache import State
from qwen.sample import check_prompt, pick_token


@torch.inference_mode()
def generate_batch(model, prompts, max_new_tokens=100, stop=(), temperature=0, top_k=None, top_p=None,
                   generator=None, pad_id=0):
    """prompts: list of token-id lists -> list of new-token lists (each ends at its stop token or budget)."""
    if not prompts:
        return []
    device = model.embed_tokens.weight.device
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad_id, dtype=torch.long, device=device)      # (B, T)
    for row, p in enumerate(prompts):
        check_prompt(model, torch.tensor([p]))
        ids[row, longest - len(p):] = torch.tensor(p)
    state = State(model)
    state.pad = torch.tensor([longest - len(p) for p in prompts], device=device)           # (B,)
    logits = model(ids, state, last_only=True)[:, -1]                                        # (B, V)
    outs, done = [[] for _ in prompts], [False] * len(prompts)
    for _ in range(max_new_tokens):
        toks = pick_token(logits, temperature, top_k, top_p, generator)                      # (B,)
        for row, t in enumerate(toks.tolist()):
            if not done[row]:
                outs[row].append(t)
                done[row] = t in stop
        if all(done):
            break
        logits = model(toks[:, None], state)[:, -1]
    return outs
