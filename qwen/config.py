"""The model's shape, read once from the checkpoint's `config.json` and passed whole to every module.

A Qwen3.5 checkpoint on the hub keeps its text model under `text_config` (beside a `vision_config` we
ignore); a text-only checkpoint has the same fields at the top level. Either way we end up with one
`Config`, e.g. for Qwen3.5-0.8B:

    Config(hidden_size=1024, num_hidden_layers=24, layer_types=['linear_attention'] * 3 + ['full_attention'], ...)

Nothing is hard-coded: every number comes from the file, and a missing one is an error naming the file.
"""
import json
import os
from dataclasses import asdict, dataclass, field

# Fields without which we cannot build the model. Everything else has the reference's default.
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads")


@dataclass
class Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int = 256
    # Gated DeltaNet (the "linear_attention" layers)
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    layer_types: list = field(default_factory=list)   # one of "linear_attention" / "full_attention" per layer
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10_000_000.0
    partial_rotary_factor: float = 0.25                # rotary covers this fraction of each attention head
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    mtp_num_hidden_layers: int = 0
    eos_token_id: object = None

    @property
    def rotary_dim(self):
        return int(self.head_dim * self.partial_rotary_factor)

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d, source="config"):
        """Build from a config dict: the hub's {"text_config": {...}} or a bare text config."""
        text = d.get("text_config", d)
        missing = [k for k in REQUIRED if k not in text]
        if missing:
            raise ValueError(f"{source}: missing {', '.join(missing)} (expected a Qwen3.5 text config, "
                             "either at the top level or under 'text_config')")
        known = {k: text[k] for k in cls.__dataclass_fields__ if k in text}
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        known.setdefault("rope_theta", rope.get("rope_theta", text.get("rope_theta", 10_000_000.0)))
        known["partial_rotary_factor"] = rope.get("partial_rotary_factor",
                                                  text.get("partial_rotary_factor", 0.25))
        if "tie_word_embeddings" not in text and "tie_word_embeddings" in d:
            known["tie_word_embeddings"] = d["tie_word_embeddings"]
        cfg = cls(**known)
        if not cfg.layer_types:
            interval = text.get("full_attention_interval", 4)
            cfg.layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                               for i in range(cfg.num_hidden_layers)]
        if len(cfg.layer_types) != cfg.num_hidden_layers:
            raise ValueError(f"{source}: layer_types has {len(cfg.layer_types)} entries "
                             f"but num_hidden_layers is {cfg.num_hidden_layers}")
        bad = set(cfg.layer_types) - {"linear_attention", "full_attention"}
        if bad:
            raise ValueError(f"{source}: unknown layer types {sorted(bad)}")
        if cfg.num_attention_heads % cfg.num_key_value_heads or \
                cfg.linear_num_value_heads % cfg.linear_num_key_heads:
            raise ValueError(f"{source}: head counts must divide (attention {cfg.num_attention_heads}/"
                             f"{cfg.num_key_value_heads}, DeltaNet {cfg.linear_num_value_heads}/"
                             f"{cfg.linear_num_key_heads})")
        return cfg


def read_config(path):
    """Config of the model folder `path` (its `config.json`)."""
    file = os.path.join(path, "config.json")
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{file}: no config.json in the model folder")
    try:
        with open(file, encoding="utf-8") as f:
            d = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{file}: not valid JSON ({e})") from e
    return Config.from_dict(d, source=file)
