"""A draft head that replays a known transcript with a chosen hit rate: for tests and benchmarks.

Speed and exactness at a given acceptance rate can be measured without trained weights: take the
main model's own greedy transcript, and let the "head" guess the true next token with probability
`hit_rate` (else a wrong one). Each guess first runs the real head, output layer included (over its
FR-Spec draft vocabulary when one is set), so a draft costs what it really costs; only the choice is
replaced.

    head = ScriptedHead(MTP(cfg), transcript=prompt + greedy_output, hit_rate=0.7)
    generate_mtp(model, head, ids, ...)

For draft trees (qwen.tree), which also try the head's second guess: second_rate, the probability that the
true token is the head's second choice where its first is wrong. For k="auto" (qwen.adaptive), which reads
how sure the head is: confidence, the top probability each guess shows (a number, or a function of the
guessed token's position); by default the head is certain.

A draft vocabulary caps acceptance (FR-Spec: the head scores only some tokens, so it can never guess the others).
With random weights the transcript's tokens say nothing about that, so `text` gives, position for position, the ids
of a real text in the real tokenizer: where text's token lies outside the head's draft vocabulary the guess misses,
whatever the hit rate (counted in `outside`). Acceptance is then capped by the real text's coverage, as it would be.
"""
import torch


class ScriptedHead:
    def __init__(self, head, transcript, hit_rate, seed=0, second_rate=0.0, confidence=None, text=None):
        self.head, self.cfg = head, head.cfg
        self.transcript = list(transcript)
        vocab = getattr(head, "draft_vocab", None)
        kept = None if vocab is None else set(vocab.tolist())
        # per position: can the draft guess this token at all? (True everywhere without a text or a draft vocabulary)
        self.guessable = None if text is None or kept is None else [t in kept for t in text]
        self.outside = 0                         # guesses missed because the text's token is outside the vocabulary
        self.hit_rate, self.second_rate, self.confidence = hit_rate, second_rate, confidence
        self.rng = torch.Generator().manual_seed(seed)

    def draft(self, model, hidden, tokens, start, cache, row=-1):
        """The interface generate_mtp calls (MTP.draft): the real head's pass, then a scripted guess
        for the token after position start + row, i.e. transcript[start + row + 2]."""
        _, _, out = self.head.draft(model, hidden, tokens, start, cache, row)       # pay for the real head
        target = start + row % tokens.shape[1] + 2
        true = self.transcript[target] if target < len(self.transcript) else 0
        hit = torch.rand((), generator=self.rng) < self.hit_rate
        if self.guessable is not None and not self.guessable[target % len(self.guessable)]:
            hit, self.outside = False, self.outside + 1
        choice = true if hit else (true + 1) % self.cfg.vocab_size
        logits = torch.full((1, self.cfg.vocab_size), -30.0, device=out.device)
        logits[:, choice] = 30.0
        if self.confidence is not None:          # the choice's probability c, the rest sharing 1 - c evenly
            c = self.confidence(target) if callable(self.confidence) else self.confidence
            logits.fill_(torch.log(torch.tensor((1 - c) / (self.cfg.vocab_size - 1) + 1e-30)))
            logits[:, choice] = torch.log(torch.tensor(c))
        if not hit and self.second_rate and torch.rand((), generator=self.rng) < self.second_rate:
            logits[:, true] = logits[0, choice] - 1.0                  # the true token, second
        return logits, None, out
