"""Teach the MTP head to guess what the main model will say, the main model frozen (self-distillation).

    python -m qwen.train.distill --corpus data/corpus --checkpoint assets --steps 300 --out assets

A draft is accepted when it equals the main model's greedy choice, not the corpus's next token, so the head
learns the main model's distribution over token t+2 (a cross-entropy against its softmax) instead of the
corpus token the pre-training loop (loop.py) taught it. And a round of k drafts feeds the head its own output
for every draft after the first (mtp.greedy_round): the head never saw that input in pre-training. So each step
also trains that chained pass ("training-time test", as in EAGLE-3): at position t+1 the head reads its own
output from position t and the embedding of token t+2, attends to the first pass's keys at positions 0..t and
to itself (what the head cache holds when it drafts), and is scored against the main model at t+2.

Only the head's own weights train; the embedding and output layer it shares with the main model stay as they
are, so the main model's output, and with it every speculative run's output, is unchanged. Writes the
checkpoint with the new mtp.* tensors; config.json's "training" gains a "distill" record.
"""
import argparse
import json
import os
import time

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from qwen.cache import AttentionState, State
from qwen.config import read_config
from qwen.model import Model
from qwen.mtp import MTP
from qwen.rope import rope_tables
from qwen.train.export import checkpoint_tensors
from qwen.train.loop import adamw, learning_rate_at, random_windows, tokenize_corpus


def chained_pass(mtp, emb_next, prev_out, first_keys, first_values):
    """The head fed its own output, for every position at once. Query j (at position j+1) reads the head's
    output at j and the embedding of the token after j+1, and sees the first pass's keys at 0..j and its own.
    emb_next, prev_out: (B, T, H); first_keys, first_values: (B, nkv, T, D) -> the head's output (B, T, H)"""
    T = emb_next.shape[1]
    layer = mtp.layers[0]
    cos, sin = rope_tables(mtp.cfg, torch.arange(1, T + 1, device=emb_next.device))
    x = mtp.combine(emb_next, prev_out)
    q, k, v, gate = layer.self_attn.project(layer.input_layernorm(x), cos, sin)
    j = torch.arange(T, device=x.device)
    # slots 0..T-1: the first pass's keys, causal; slots T..2T-1: the chained keys, each query its own only
    mask = torch.cat([j[None, :] <= j[:, None], j[None, :] == j[:, None]], dim=1)[None, None]   # (1, 1, T, 2T)
    x = x + layer.self_attn.attend(q, torch.cat([first_keys, k], 2), torch.cat([first_values, v], 2), gate, mask)
    x = x + layer.mlp(layer.post_attention_layernorm(x))
    return mtp.norm(x)


def soft_cross_entropy(logits, target_logits):
    """Cross-entropy of logits against the distribution softmax(target_logits), per position -> mean."""
    return -(target_logits.float().softmax(-1) * logits.float().log_softmax(-1)).sum(-1).mean()


def distill_losses(model, mtp, ids):
    """ids (B, T+1) -> (first-draft loss, chained-draft loss, first-draft agreement, chained agreement given the
    first agreed). Agreement: the head's top token equals the main model's (what greedy acceptance counts)."""
    x, y = ids[:, :-1], ids[:, 1:]                                                 # (B, T) each
    with torch.no_grad():
        hidden = model.hidden(x, State(model))                                     # (B, T, H)
        target = model.lm_head(hidden)                                             # (B, T, V): predicts t+1
    cache = AttentionState()
    out1 = mtp(model.embed_tokens(y[:, :-1]), hidden[:, :-1], 0, cache)            # (B, T-1, H): guesses t+2
    n = out1.shape[1]
    out2 = chained_pass(mtp, model.embed_tokens(y[:, 1:-1]), out1[:, :-1],         # (B, T-2, H): guesses t+3
                        cache.k[:, :, :n - 1], cache.v[:, :, :n - 1])
    logits1, logits2 = model.lm_head(out1), model.lm_head(out2)
    loss1 = soft_cross_entropy(logits1, target[:, 1:])
    loss2 = soft_cross_entropy(logits2, target[:, 2:])
    with torch.no_grad():
        agree1 = logits1.argmax(-1) == target[:, 1:].argmax(-1)                     # (B, T-1)
        agree2 = logits2.argmax(-1) == target[:, 2:].argmax(-1)                     # (B, T-2)
        both = agree1[:, :-1]
        chained = (agree2 & both).sum() / both.sum().clamp(min=1)
    return loss1, loss2, agree1.float().mean(), chained


@torch.no_grad()
def heldout(model, mtp, tokens, length, device, n_batches=8):
    """distill_losses averaged over the same held-out windows every time -> four floats"""
    g = torch.Generator().manual_seed(1234)
    mtp.eval()
    rows = [distill_losses(model, mtp, random_windows(tokens, 8, length, g).to(device)) for _ in range(n_batches)]
    mtp.train()
    return [round(sum(r[i].item() for r in rows) / n_batches, 4) for i in range(4)]


def write_head(checkpoint, out, model, mtp, record):
    """Copy `checkpoint` to `out` with the head's tensors replaced (bfloat16, like the rest) and `record`
    appended to config.json's training statistics."""
    os.makedirs(out, exist_ok=True)
    tensors = load_file(os.path.join(checkpoint, "model.safetensors"))
    for name, w in checkpoint_tensors(model, mtp).items():
        if name.startswith("mtp."):
            tensors[name] = w.detach().to("cpu", torch.bfloat16).contiguous()
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(checkpoint, "config.json")) as f:
        config = json.load(f)
    config.setdefault("training", {})["distill"] = record
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if os.path.abspath(out) != os.path.abspath(checkpoint):
        for name in os.listdir(checkpoint):
            if name not in ("model.safetensors", "config.json") and os.path.isfile(os.path.join(checkpoint, name)):
                with open(os.path.join(checkpoint, name), "rb") as src, open(os.path.join(out, name), "wb") as dst:
                    dst.write(src.read())


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qwen.train.distill", description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="data/corpus", help="folder with train.txt and heldout.txt")
    ap.add_argument("--checkpoint", default="assets", help="the trained checkpoint (its tokenizer is used)")
    ap.add_argument("--out", default="assets", help="where the checkpoint with the new head is written")
    ap.add_argument("--work", default="data/distill", help="the token cache")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(args.work, exist_ok=True)
    data = tokenize_corpus(args.corpus, args.checkpoint, os.path.join(args.work, "tokens.pt"))
    cfg = read_config(args.checkpoint)
    model = Model.from_pretrained(args.checkpoint, device=device).requires_grad_(False)
    mtp = MTP.from_pretrained(cfg, args.checkpoint, device=device).train().requires_grad_(True)
    opt = adamw(list(mtp.parameters()), args.lr)
    g = torch.Generator().manual_seed(args.seed)
    before = heldout(model, mtp, data["heldout"], args.length, device)
    print(f"held out before: loss {before[0]} / chained {before[1]}; agreement {before[2]} / chained {before[3]}")
    log, start = [{"step": 0, "heldout": before}], time.time()
    bar = tqdm(range(args.steps), desc="distill")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = learning_rate_at(step, args.steps, args.lr, warmup=min(30, args.steps // 10))
        loss1, loss2, agree1, agree2 = distill_losses(model, mtp, random_windows(data["train"], args.batch,
                                                                                 args.length, g).to(device))
        opt.zero_grad(set_to_none=True)
        (loss1 + loss2).backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        bar.set_postfix(first=f"{agree1.item():.3f}", chained=f"{agree2.item():.3f}")
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            log.append({"step": step + 1, "heldout": heldout(model, mtp, data["heldout"], args.length, device),
                        "seconds": round(time.time() - start, 1)})
            bar.write(json.dumps(log[-1]))
    record = {"what": "head only, against the main model's distribution, first and chained drafts "
              "(qwen/train/distill.py)", "steps": args.steps, "batch": args.batch, "length": args.length,
              "lr": args.lr, "seed": args.seed, "seconds": round(time.time() - start),
              "heldout": "loss, chained loss, agreement, chained agreement", "log": log}
    write_head(args.checkpoint, args.out, model, mtp.eval(), record)
    print(f"held out after: {log[-1]['heldout']}; wrote {args.out}")


if __name__ == "__main__":
    main()
