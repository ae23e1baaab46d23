"""A trained model and MTP head written in the hub layout of Qwen/Qwen3.5-*, which Model.from_pretrained and
transformers both load:

    config.json              {"model_type": "qwen3_5", "text_config": {...}, "training": the run's statistics}
    model.safetensors        model.language_model.* and mtp.*, bfloat16 (lm_head.weight only when not tied)
    generation_config.json   stops at <|im_end|> or <|endoftext|>, greedy
    tokenizer.json, tokenizer_config.json     copied from the tokenizer folder (qwen/train/bpe.py)
"""
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer


def checkpoint_tensors(model, mtp):
    """The weights under the checkpoint's names: model.language_model.<engine name>, mtp.<head name>, and
    lm_head.weight unless it is the embedding (tied)."""
    tensors = {}
    for name, weight in model.state_dict().items():
        if name == "lm_head.weight":
            if not model.cfg.tie_word_embeddings:
                tensors[name] = weight
        else:
            tensors["model.language_model." + name] = weight
    for name, weight in mtp.state_dict().items():
        tensors["mtp." + name] = weight
    return tensors


def hub_config(cfg, eos, pad, stats):
    """config.json of the multimodal Qwen3.5 checkpoints, with the text model under text_config."""
    text = cfg.to_dict()
    text.pop("eos_token_id", None)
    # the rope as the real checkpoints describe it; mrope_section is theirs (for text, the three position streams
    # of the multimodal rope are equal, so its sections change nothing)
    rope = {"rope_type": "default", "rope_theta": text.pop("rope_theta"),
            "partial_rotary_factor": text.pop("partial_rotary_factor"),
            "mrope_section": [11, 11, 10], "mrope_interleaved": True}
    text.update(model_type="qwen3_5_text", rope_parameters=rope, hidden_act="silu", attention_bias=False,
                eos_token_id=eos, pad_token_id=pad, bos_token_id=None, dtype="bfloat16")
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "tie_word_embeddings": cfg.tie_word_embeddings, "text_config": text, "training": stats}


def export_checkpoint(model, mtp, tokenizer_dir, out, stats):
    """Write the checkpoint folder `out` (see the module docstring); `stats` goes into config.json as "training"."""
    os.makedirs(out, exist_ok=True)
    # bfloat16 on disk, like the real checkpoints: half the bytes, and the file stays under 10 MB
    tensors = {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in checkpoint_tensors(model, mtp).items()}
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    tk = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    eos, pad = tk.token_to_id("<|im_end|>"), tk.token_to_id("<|endoftext|>")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hub_config(model.cfg, eos, pad, stats), f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [eos, pad], "pad_token_id": pad, "do_sample": False}, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(out, name))
