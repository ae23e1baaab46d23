"""Finding a model folder and reading its safetensors, memory-mapped, one key prefix at a time.

A model is a folder in the hub layout: `config.json`, `model.safetensors` (or shards listed in
`model.safetensors.index.json`), `tokenizer.json`, `tokenizer_config.json`. Keys look like

    model.language_model.layers.0.linear_attn.A_log   (hub layout of Qwen/Qwen3.5-*)
    model.layers.0.linear_attn.A_log                  (text-only layout)
    mtp.fc.weight                                     (the draft head)

`load_weights(path, part="mtp.")` returns the tensors under one prefix with the prefix removed, so
they can be copied straight into a module whose parameter names equal the checkpoint's keys.
"""
import json
import os

import torch

from qwen import environment

EMBEDDED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
ENV_VAR = "QWEN_MODEL"   # names the default model when find_model() is called without one


class ModelNotFound(FileNotFoundError):
    """No model folder could be found or downloaded for the given name."""


def find_model(name=None):
    """Folder of a model: `name` may be a local folder, a hub id such as "Qwen/Qwen3.5-0.8B", or None
    for $QWEN_MODEL, falling back to the demo checkpoint embedded under assets/."""
    name = name or environment.read(ENV_VAR) or EMBEDDED
    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, "config.json")):
            raise ModelNotFound(f"{name}: folder has no config.json")
        return name
    looks_local = name.startswith((".", "/", "~")) or os.sep in name.strip("/").replace("/", "", 1)
    if looks_local or name.count("/") != 1:
        raise ModelNotFound(f"{name}: no such model folder (and not a hub id of the form owner/name)")
    return download(name)


def download(repo_id):
    """Fetch a hub model (with huggingface_hub's progress bar) and return its cached folder."""
    try:
        from huggingface_hub import snapshot_download
        return snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.txt"])
    except Exception as e:   # offline, unknown repo, interrupted download: all end the same way
        raise ModelNotFound(f"{repo_id}: could not download from the Hugging Face hub "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from e


def weight_files(path):
    """The safetensors files of a model folder, with the key -> file map when sharded."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        return sorted({os.path.join(path, v) for v in weight_map.values()})
    single = os.path.join(path, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    raise FileNotFoundError(f"{path}: no model.safetensors or model.safetensors.index.json")


def _open(file):
    from safetensors import safe_open
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{file}: weight file listed in the index is missing")
    try:
        return safe_open(file, framework="pt")
    except Exception as e:
        raise ValueError(f"{file}: not a readable safetensors file ({e})") from e


def list_tensors(path):
    """Every tensor name in the model folder."""
    names = []
    for file in weight_files(path):
        with _open(file) as f:
            names += list(f.keys())
    return names


MAPPED_AT_ONCE = 256 << 20     # bytes read through one mapping of a weight file before it is reopened


def load_weights(path, part="model.language_model.", dtype=torch.float32):
    """{name without `part`: tensor} for every tensor whose name starts with `part`, cast to dtype.
    subtle: the pages of a file's memory map count as this process's memory until the map closes, so a whole
    checkpoint read through one map would stand on top of its converted copy (+1.1 GB at the 0.8B's peak); each
    file is reopened every MAPPED_AT_ONCE bytes instead."""
    out = {}
    for file in weight_files(path):
        for key, t in _read(file, part):
            out[key[len(part):]] = t.to(dtype) if t.is_floating_point() else t
    return out


def _read(file, part):
    """(key, tensor) for every tensor of one file whose name starts with `part`, through maps of at most
    MAPPED_AT_ONCE bytes read."""
    with _open(file) as f:
        keys = [key for key in f.keys() if key.startswith(part)]
    while keys:
        read = 0
        with _open(file) as f:
            while keys and read < MAPPED_AT_ONCE:
                key = keys.pop(0)
                try:
                    t = f.get_tensor(key)
                except Exception as e:
                    raise ValueError(f"{file}: tensor {key} cannot be read ({e})") from e
                read += t.numel() * t.element_size()
                yield key, t


def text_prefix(names):
    """The prefix of the main text model's tensors: hub layout or text-only layout."""
    if any(n.startswith("model.language_model.") for n in names):
        return "model.language_model."
    return "model."
