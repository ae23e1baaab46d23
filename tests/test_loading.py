"""Finding and loading checkpoints: layouts, shards, and clear errors for everything broken."""
import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from qwen.cache import State
from qwen.model import Model
from qwen.sample import generate
from qwen.weights import ModelNotFound, find_model, load_weights
from reference import reference_model, save_checkpoint, text_config


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    ref = reference_model(text_config(), seed=2)
    mtp = {"mtp.fc.weight": torch.randn(64, 128)}                      # present in hub files, ignored here
    vis = {"model.visual.patch_embed.weight": torch.randn(4, 4)}
    return ref, save_checkpoint(ref, str(tmp_path_factory.mktemp("ck") / "hub"), "hub", {**mtp, **vis})


def test_hub_layout_with_mtp_and_vision_tensors_loads_the_text_model(checkpoint):
    ref, path = checkpoint
    model = Model.from_pretrained(path)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(model(ids, State(model)), ref(ids).logits, atol=1e-4)
    assert set(load_weights(path, part="mtp.")) == {"fc.weight"}


def test_sharded_checkpoint_loads_like_the_single_file(checkpoint, tmp_path):
    ref, path = checkpoint
    tensors = load_file(os.path.join(path, "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / file))
        weight_map.update({k: file for k in keys})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    shutil.copy(os.path.join(path, "config.json"), tmp_path / "config.json")
    a, b = Model.from_pretrained(path), Model.from_pretrained(str(tmp_path))
    ids = torch.tensor([[5, 6, 7]])
    assert torch.equal(a(ids, State(a)), b(ids, State(b)))


def test_bfloat16_model_generates(checkpoint):
    _, path = checkpoint
    model = Model.from_pretrained(path, dtype=torch.bfloat16)
    assert model.embed_tokens.weight.dtype == torch.bfloat16
    assert len(generate(model, torch.tensor([[1, 2, 3]]), max_new_tokens=5)) == 5


def broken(path, tmp_path, edit):
    dst = tmp_path / "broken"
    shutil.copytree(path, dst)
    edit(dst)
    return str(dst)


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFound, match="no such model folder"):
        find_model(str(tmp_path / "nope"))


def test_missing_config(checkpoint, tmp_path):
    path = broken(checkpoint[1], tmp_path, lambda d: os.remove(d / "config.json"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        Model.from_pretrained(path)


def test_incomplete_config_names_the_missing_field(checkpoint, tmp_path):
    def edit(d):
        cfg = json.loads((d / "config.json").read_text())
        del cfg["text_config"]["hidden_size"]
        (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="config.json: missing hidden_size"):
        Model.from_pretrained(broken(checkpoint[1], tmp_path, edit))


def test_truncated_safetensors_names_the_file(checkpoint, tmp_path):
    def edit(d):
        data = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="model.safetensors"):
        Model.from_pretrained(broken(checkpoint[1], tmp_path, edit))


def test_tensor_of_the_wrong_shape_is_named(checkpoint, tmp_path):
    def edit(d):
        cfg = json.loads((d / "config.json").read_text())
        cfg["text_config"]["intermediate_size"] = 100
        (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"mlp\.(gate|up|down)_proj\.weight has shape"):
        Model.from_pretrained(broken(checkpoint[1], tmp_path, edit))


def test_unknown_hub_id_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound, match="could not download"):
        find_model("no-such-owner/no-such-model")


def test_empty_prompt_and_prompt_longer_than_context_are_refused(checkpoint):
    model = Model.from_pretrained(checkpoint[1])
    with pytest.raises(ValueError, match="empty prompt"):
        generate(model, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="context"):
        generate(model, torch.zeros(1, model.cfg.max_position_embeddings + 1, dtype=torch.long))


def test_find_model_defaults_to_the_embedded_checkpoint(monkeypatch):
    monkeypatch.delenv("QWEN_MODEL", raising=False)
    assert os.path.samefile(find_model(), os.path.join(os.path.dirname(__file__), "..", "assets"))
