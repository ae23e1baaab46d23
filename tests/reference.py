"""Test helpers: tiny random Qwen3.5 models built with the reference implementation (transformers),
saved as checkpoint folders in the hub layout or the text-only layout.

Only tests import this; the engine never imports transformers.
"""
import json
import os

import torch
from safetensors.torch import save_file

SMALL = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32,
             linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
             linear_value_head_dim=16, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
             tie_word_embeddings=True, max_position_embeddings=4096,
             rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25,
                                  mrope_section=[2, 1, 1], mrope_interleaved=True))


def text_config(**overrides):
    cfg = json.loads(json.dumps(SMALL))
    rope = overrides.pop("rope_parameters", None)
    cfg.update(overrides)
    if rope:
        cfg["rope_parameters"].update(rope)
    return cfg


def reference_model(cfg_dict, seed=0):
    """A transformers Qwen3_5ForCausalLM with every weight randomised (norms and decays included)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    torch.manual_seed(seed)
    ref = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**cfg_dict)).float().eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(-1.0, 1.5))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif "norm" in name:
                p.copy_(torch.randn_like(p) * 0.3 + (1.0 if name.endswith("linear_attn.norm.weight") else 0.0))
            else:
                p.copy_(torch.randn_like(p) * 0.2)
    return ref


def save_checkpoint(ref, folder, layout="hub", extra_tensors=None):
    """Write `ref` as a model folder. layout "hub": model.language_model.* under a text_config;
    "text": model.* with a bare text config."""
    os.makedirs(folder, exist_ok=True)
    cfg = ref.config.to_dict()
    sd = {k: v.detach().clone().contiguous() for k, v in ref.state_dict().items()}
    tied = cfg.get("tie_word_embeddings", False)
    if tied:
        sd.pop("lm_head.weight", None)
    tensors = {}
    for k, v in sd.items():
        if layout == "hub" and k.startswith("model."):
            k = "model.language_model." + k[len("model."):]
        tensors[k] = v
    tensors.update(extra_tensors or {})
    save_file(tensors, os.path.join(folder, "model.safetensors"))
    if layout == "hub":
        cfg.pop("architectures", None)
        config = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
                  "tie_word_embeddings": tied, "text_config": {**cfg, "model_type": "qwen3_5_text"}}
    else:
        config = {**cfg, "model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"]}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return folder
