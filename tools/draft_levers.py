"""Two levers for a cheaper or better-covering draft, measured before building either (issue #77):

    python -m tools.draft_levers            # a minute: the real tokenizer's counts, the embedded model's head

1. The prompt's own tokens joining the draft vocabulary. For windows of real text (a 64-token prompt, its next 128
   tokens), the share of continuation tokens inside the shipped draft vocabulary (qwen/vocabs), and inside it with the
   prompt's tokens added: what joining them per request could win at most.
2. A low-precision copy of the full output layer used only to draft. On the embedded checkpoint's trained head over
   real text: how often the draft's argmax over every token from rows rounded to 8 (or 4) bits, one scale per row,
   equals the argmax from the exact rows; beside it, how often the shipped draft vocabulary (its draft_vocab.json)
   holds the exact argmax. Bytes a draft reads at the 0.8B shape (248,320 x 1,024 rows) are printed for each.
"""
import glob
import gzip
import json
import os

import torch

from qwen.cache import AttentionState, State
from qwen.model import Model
from qwen.mtp import MTP
from qwen.standin import real_texts, real_tokenizer
from qwen.vocabs import shipped_vocabs

DEBIAN = "/usr/share/debian-reference/debian-reference.{}.txt.gz"   # unseen text, where the Debian package is installed


def texts():
    """{name: text}: the bench's two texts, the engine's code and, where installed, the Debian Reference."""
    out = dict(real_texts())
    out["code (qwen/*.py)"] = "".join(open(f, encoding="utf-8").read() for f in sorted(glob.glob("qwen/*.py")))
    for lang in ("en", "zh-cn"):
        if os.path.exists(DEBIAN.format(lang)):
            with gzip.open(DEBIAN.format(lang), "rt", encoding="utf-8") as f:
                out[f"Debian Reference ({lang})"] = f.read()[:300_000]
    return out


def prompt_join(ids, vocab, prompt=64, continuation=128):
    """-> (coverage of continuation tokens, coverage with each window's prompt tokens joining the vocabulary)"""
    n = missed = joined = 0
    for s in range(0, len(ids) - prompt - continuation + 1, prompt + continuation):
        seen = set(ids[s:s + prompt])
        for t in ids[s + prompt:s + prompt + continuation]:
            n += 1
            if t not in vocab:
                missed += 1
                joined += t in seen
    return 1 - missed / n, 1 - (missed - joined) / n


def rounded_rows(w, bits):
    """w (V, H) rounded to `bits`-bit integers with one scale per row (symmetric), back in float32."""
    top = 2 ** (bits - 1) - 1
    scale = w.abs().amax(1, keepdim=True).clamp_min(1e-12) / top
    return (w / scale).round().clamp(-top, top) * scale


def head_outputs(path, ids):
    """The embedded head's outputs (T, H) over a text: the main model's hidden states at t, the token at t + 1."""
    model = Model.from_pretrained(path)
    head = MTP.from_pretrained(model.cfg, path, lm_head=model.lm_head)
    with torch.inference_mode():
        ids = torch.tensor([ids])
        _, hidden = model.forward_hidden(ids, State(model, ids.shape[1]))
        out = head(model.embed_tokens(ids[:, 1:]), hidden[:, :-1], 0, AttentionState())[0]
    return model, head, out


def main():
    enc = real_tokenizer()
    vocab = set(json.load(open(shipped_vocabs()[0][1]))["token_ids"])
    print(f"1. The prompt's tokens joining the shipped draft vocabulary ({len(vocab):,} tokens), real tokenizer:")
    for name, text in texts().items():
        plain, joined = prompt_join(enc.encode(text, allowed_special="all"), vocab)
        print(f"   {name}: coverage {plain:.1%}, with the prompt's tokens {joined:.1%} (+{joined - plain:.1%})")
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file("assets/tokenizer.json")
    ids = tok.encode(real_texts()["English"][:6000]).ids[:1024]
    model, head, out = head_outputs("assets", ids)
    w = model.lm_head.weight.float()
    exact = (out @ w.T).argmax(-1)
    print(f"2. The embedded head over the README ({out.shape[0]} positions, vocabulary {w.shape[0]:,}):")
    for bits in (8, 4):
        agree = ((out @ rounded_rows(w, bits).T).argmax(-1) == exact).float().mean().item()
        print(f"   {bits}-bit rows, every token: argmax equal {agree:.1%}; at the 0.8B shape a draft reads "
              f"{248320 * 1024 * bits / 8 / 1e6:.0f} MB of output layer")
    if head.draft_vocab is not None:
        held = torch.isin(exact, head.draft_vocab).float().mean().item()
        print(f"   its draft vocabulary ({len(head.draft_vocab):,} tokens): holds the exact argmax {held:.1%}; at the "
              f"0.8B shape 32,770 bfloat16 rows read {32770 * 1024 * 2 / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
