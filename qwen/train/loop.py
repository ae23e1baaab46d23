"""Train a tiny Qwen3.5-architecture model and its MTP head from scratch, with the engine's own modules.

The embedded demo checkpoint under assets/ comes from this loop. The whole pipeline, offline:

    apt-get install -y python3.11-doc fortunes-zh bible-kjv-text bible-kjv       # the corpus's sources
    python -m qwen.train.corpus --out data/corpus
    python -m qwen.train.bpe --corpus data/corpus --out data/tok
    python -m qwen.train --corpus data/corpus --tokenizer data/tok --out assets

Loss = next-token cross-entropy + MTP_WEIGHT * the head's cross-entropy on token t+2, where the head reads the main
model's final hidden state at t and the embedding of token t+1 (exactly what it reads when drafting). Gradients of
both flow into the shared embedding and the main stack.

Resumable (--resume: checkpoints in --work every --save-every steps), seeded, a periodic held-out loss, a progress
bar; runs on CUDA when there is one.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm

from qwen.cache import AttentionState, State
from qwen.config import Config
from qwen.model import Model
from qwen.mtp import MTP
from qwen.train.corpus import read_corpus
from qwen.train.export import export_checkpoint

MTP_WEIGHT = 0.5
# The demo model: the real 0.8B's structure (3 DeltaNet : 1 gated attention, tied embeddings, MTP head), scaled
# down so that it trains in under an hour on two CPU cores and stays far below 10 MB.
DEMO_SHAPE = dict(hidden_size=192, intermediate_size=352, num_hidden_layers=8, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, linear_num_key_heads=4, linear_num_value_heads=4,
                  linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
                  rope_theta=10_000_000.0, partial_rotary_factor=0.25, tie_word_embeddings=True,
                  max_position_embeddings=2048, mtp_num_hidden_layers=1)


def demo_config(vocab_size, **overrides):
    """The demo model's Config (DEMO_SHAPE with `overrides`), every fourth layer full attention."""
    shape = {**DEMO_SHAPE, **overrides}
    shape["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                            for i in range(shape["num_hidden_layers"])]
    return Config(vocab_size=vocab_size, **shape)


def init_weights(module, n_layers, generator):
    """Overwrite `module`'s parameters in place: small normal weights, residual outputs scaled down with depth,
    (1 + weight) norms at 1, DeltaNet decays as in flash-linear-attention."""
    for name, p in module.named_parameters():
        with torch.no_grad():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(1, 16, generator=generator).log())
            elif name.endswith("dt_bias"):
                dt = torch.exp(torch.empty_like(p).uniform_(math.log(1e-3), math.log(0.1), generator=generator))
                p.copy_(dt + torch.log(-torch.expm1(-dt)))                 # inverse softplus: softplus(p) = dt
            elif name.endswith("linear_attn.norm.weight"):
                p.fill_(1.0)                                                # the gated norm scales by weight
            elif "norm" in name:
                p.zero_()                                                   # the others by 1 + weight
            elif name.endswith("conv1d.weight"):
                p.normal_(0, 0.5 / math.sqrt(p.shape[-1]), generator=generator)
            else:
                residual = name.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight"))
                p.normal_(0, 0.02 / math.sqrt(2 * n_layers) if residual else 0.02, generator=generator)


def main_and_mtp_losses(model, mtp, ids):
    """ids (B, T+1) -> (main loss, MTP loss). The head pairs h_t with x_{t+1} and predicts x_{t+2}."""
    x, y = ids[:, :-1], ids[:, 1:]                                                # (B, T) each
    hidden = model.hidden(x, State(model))                                        # (B, T, H)
    main = F.cross_entropy(model.lm_head(hidden).flatten(0, 1).float(), y.flatten())
    h = mtp(model.embed_tokens(y[:, :-1]), hidden[:, :-1], 0, AttentionState())  # (B, T-1, H)
    draft = F.cross_entropy(model.lm_head(h).flatten(0, 1).float(), y[:, 1:].flatten())
    return main, draft


def tokenize_corpus(corpus, tokenizer_dir, cache):
    """{"train": ids, "heldout": ids} (int32), documents separated by <|endoftext|>. Read from `cache` when it
    exists, else computed and saved there."""
    if os.path.isfile(cache):
        return torch.load(cache)
    tk = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    eot = tk.token_to_id("<|endoftext|>")
    out = {}
    for split, docs in zip(("train", "heldout"), read_corpus(corpus)):
        ids = []
        for encoding in tk.encode_batch(docs):
            ids += encoding.ids + [eot]
        out[split] = torch.tensor(ids, dtype=torch.int32)
    torch.save(out, cache)
    return out


def random_windows(tokens, batch, length, generator):
    """`batch` windows of length+1 consecutive tokens at random starts. -> (batch, length+1) long"""
    starts = torch.randint(0, len(tokens) - length - 1, (batch,), generator=generator)
    return torch.stack([tokens[s:s + length + 1] for s in starts.tolist()]).long()


@torch.no_grad()
def heldout_losses(model, mtp, tokens, length, device, n_batches=8):
    """(main, MTP) loss averaged over the same n_batches batches of held-out windows every time."""
    g = torch.Generator().manual_seed(1234)
    model.eval(); mtp.eval()
    pairs = [main_and_mtp_losses(model, mtp, random_windows(tokens, 8, length, g).to(device))
             for _ in range(n_batches)]
    model.train(); mtp.train()
    return sum(p[0].item() for p in pairs) / n_batches, sum(p[1].item() for p in pairs) / n_batches


def learning_rate_at(step, steps, peak, warmup=100):
    """Linear warm-up to `peak`, then a cosine down to 10% of it at the last step."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup))))


def adamw(params, lr):
    """AdamW with weight decay on matrices only (not on norms, biases, decays)."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m qwen.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--tokenizer", default="data/tok")
    ap.add_argument("--out", default="assets", help="where the finished checkpoint is written")
    ap.add_argument("--work", default="data/run", help="resumable checkpoints and the token cache")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--save-every", type=int, default=100)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(args.work, exist_ok=True)
    data = tokenize_corpus(args.corpus, args.tokenizer, os.path.join(args.work, "tokens.pt"))
    n_tokens = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json")).get_vocab_size()
    cfg = demo_config(vocab_size=(n_tokens + 63) // 64 * 64)        # rows past the tokenizer are never used
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    model, mtp = Model(cfg), MTP(cfg)
    init_weights(model, cfg.num_hidden_layers, g)
    init_weights(mtp, cfg.num_hidden_layers, g)
    model.to(device).train(); mtp.to(device).train()
    params = list({id(p): p for p in list(model.parameters()) + list(mtp.parameters())}.values())   # each once
    opt = adamw(params, args.lr)
    step, log, spent = 0, [], 0.0
    ckpt = os.path.join(args.work, "ckpt.pt")
    if args.resume and os.path.isfile(ckpt):
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"]); mtp.load_state_dict(saved["mtp"]); opt.load_state_dict(saved["opt"])
        step, log, spent = saved["step"], saved["log"], saved["seconds"]
        g.set_state(saved["rng"])
        print(f"resumed at step {step}")
    n_params = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for p in mtp.parameters())
    print(f"model {n_params / 1e6:.2f}M parameters + MTP head {n_mtp / 1e6:.2f}M; "
          f"{len(data['train']) / 1e6:.2f}M training tokens; device {device}")
    bar = tqdm(total=args.steps, initial=step, desc="train")
    t_start = time.time() - spent
    while step < args.steps:
        for group in opt.param_groups:
            group["lr"] = learning_rate_at(step, args.steps, args.lr)
        batch = random_windows(data["train"], args.batch, args.length, g).to(device)     # (batch, length+1)
        main_loss, mtp_loss = main_and_mtp_losses(model, mtp, batch)
        opt.zero_grad(set_to_none=True)
        (main_loss + MTP_WEIGHT * mtp_loss).backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        bar.update(1)
        bar.set_postfix(main=f"{main_loss.item():.3f}", mtp=f"{mtp_loss.item():.3f}")
        if step % args.eval_every == 0 or step == args.steps:
            h_main, h_mtp = heldout_losses(model, mtp, data["heldout"], args.length, device)
            log.append({"step": step, "train_main": round(main_loss.item(), 4), "train_mtp": round(mtp_loss.item(), 4),
                        "heldout_main": round(h_main, 4), "heldout_mtp": round(h_mtp, 4),
                        "seconds": round(time.time() - t_start, 1)})
            bar.write(json.dumps(log[-1]))
        if step % args.save_every == 0 or step == args.steps:
            torch.save({"model": model.state_dict(), "mtp": mtp.state_dict(), "opt": opt.state_dict(),
                        "step": step, "log": log, "seconds": time.time() - t_start, "rng": g.get_state()}, ckpt)
    bar.close()
    stats = {"steps": step, "batch": args.batch, "length": args.length, "seed": args.seed,
             "seconds": round(time.time() - t_start), "parameters": n_params, "mtp_parameters": n_mtp,
             "device": device, "threads": torch.get_num_threads(), "log": log}
    export_checkpoint(model.eval(), mtp.eval(), args.tokenizer, args.out, stats)
    print(f"wrote {args.out} after {stats['seconds']} s")
