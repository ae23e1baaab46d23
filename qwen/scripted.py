"""A draft head that replays a known transcript with a chosen hit rate: for tests and benchmarks.

Speed and exactness at a given acceptance rate can be measured without trained weights: take the
main model's own greedy transcript, and let the "head" guess the true next token with probability
`hit_rate` (else a wrong one). It runs the real head's layers first, so a draft costs what it really
costs; only the scoring is replaced.

    head = ScriptedHead(MTP(cfg), transcript=prompt + greedy_output, hit_rate=0.7)
    generate_mtp(model, head, ids, ...)
"""
import torch

from qwen.mtp import MTP


class ScriptedHead(MTP):
    def __init__(self, head, transcript, hit_rate, seed=0):
        torch.nn.Module.__init__(self)
        self.head, self.cfg = head, head.cfg
        self.transcript = list(transcript)
        self.hit_rate = hit_rate
        self.rng = torch.Generator().manual_seed(seed)
        self.draft_vocab = None
        self.last_pos = 0

    def forward(self, emb_next, hidden, start, cache):
        self.last_pos = start + emb_next.shape[1] - 1       # the head's entry at p guesses token p + 2
        return self.head(emb_next, hidden, start, cache)

    def draft_logits(self, h, lm_head):
        lm_head(h)                                           # pay for the real output layer
        target = self.last_pos + 2
        true = self.transcript[target] if target < len(self.transcript) else 0
        hit = torch.rand((), generator=self.rng) < self.hit_rate
        guess = true if hit else (true + 1) % self.cfg.vocab_size
        logits = torch.full((h.shape[0], self.cfg.vocab_size), -30.0, device=h.device)
        logits[:, guess] = 30.0
        return logits, None
