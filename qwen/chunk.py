"""The gated delta rule in parallel form: chunks of C tokens at a time instead of one.

Inside a chunk, the C sequential rank-1 updates of the memory collapse (the "WY"/UT representation
of products of Householder-like matrices) into one triangular solve and a few matmuls:

    Gamma[i, j] = exp(G_i - G_j)  for j <= i, with G the cumulative log-decay inside the chunk
    (I + L) U = beta * V           L = strictly-lower(beta K K^T * Gamma)
    (I + L) W = beta * K * exp(G)
    new  = U - W S                 the corrections each token writes, given the memory S at chunk start
    out  = (Q * exp(G)) S + (Q K^T * Gamma, lower incl. diagonal) new
    S    = S * exp(G_last) + (K * exp(G_last - G))^T new

Same inputs and result as deltanet.delta_rule_recurrent (a test proves it), but the work is matmuls
over C tokens, so prefill is fast; and everything is out-of-place, so autograd trains through it.
"""
import torch
import torch.nn.functional as F


def delta_rule_chunked(q, k, v, g, beta, S=None, chunk_size=64):
    """q, k: (B, H, T, Dk) l2-normalised; v: (B, H, T, Dv); g, beta: (B, H, T); S: (B, H, Dk, Dv) or None.
    -> out (B, H, T, Dv), final S"""
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    C = chunk_size
    q = q * Dk ** -0.5
    pad = (-T) % C            # zero keys and zero log-decay at the end change neither outputs nor S
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = (F.pad(t, (0, pad)) for t in (g, beta))
    N = (T + pad) // C
    q, k, v = (t.reshape(B, H, N, C, -1) for t in (q, k, v))        # (B, H, N, C, D)
    g, beta = g.reshape(B, H, N, C), beta.reshape(B, H, N, C)
    G = g.cumsum(-1)                                                 # (B, H, N, C)
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    Gamma = (G[..., :, None] - G[..., None, :]).masked_fill(~lower, float("-inf")).exp()   # (B, H, N, C, C)
    k_beta = k * beta[..., None]
    L = (k_beta @ k.transpose(-1, -2) * Gamma).tril(-1)
    I_plus_L = L + torch.eye(C, dtype=L.dtype, device=L.device)
    U = torch.linalg.solve_triangular(I_plus_L, v * beta[..., None], upper=False, unitriangular=True)
    W = torch.linalg.solve_triangular(I_plus_L, k_beta * G.exp()[..., None], upper=False, unitriangular=True)
    intra = q @ k.transpose(-1, -2) * Gamma                           # (B, H, N, C, C)
    q_decayed = q * G.exp()[..., None]
    k_to_end = k * (G[..., -1:] - G).exp()[..., None]
    chunk_decay = G[..., -1].exp()[..., None, None]                   # (B, H, N, 1, 1)
    if S is None:
        S = q.new_zeros(B, H, Dk, Dv)
    outs = []
    for n in range(N):
        new = U[:, :, n] - W[:, :, n] @ S                             # (B, H, C, Dv)
        outs.append(q_decayed[:, :, n] @ S + intra[:, :, n] @ new)
        S = S * chunk_decay[:, :, n] + k_to_end[:, :, n].transpose(-1, -2) @ new
    out = torch.stack(outs, dim=2).reshape(B, H, N * C, Dv)[:, :, :T]
    return out, S
