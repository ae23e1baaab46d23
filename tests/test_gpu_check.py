"""The GPU check's dry run (tools/gpu-check.sh --dry-run): the same steps as on a GPU, on CPU and small, so that the
check a lent GPU runs cannot rot. Every step writes its file, holds its figures and prints them with the device,
torch's version and the dtype. It compiles the decode step's graph (about 30 s on 2 cores): a compile test."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qwen.compiled import host

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("exact", "decode", "verify", "race", "memory", "page")

pytestmark = [pytest.mark.compile,
              pytest.mark.skipif(host.compiler_missing() is not None, reason="no C++ compiler")]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    env = dict(os.environ, OUT=str(out), PY=sys.executable, QWEN_COMPILE_CACHE=str(out / "cache"))
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu-check.sh"), "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=400)
    steps = {name: json.loads((out / f"{name}.json").read_text()) for name in STEPS if (out / f"{name}.json").exists()}
    return done, steps, (out / "gpu-check.txt").read_text()


def test_every_step_finishes_and_writes_its_file(dry_run):
    done, steps, log = dry_run
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert set(steps) == set(STEPS)
    for name, data in steps.items():
        assert data["finished"] and data["failed"] == 0 and not data["errors"], (name, data)
        assert data["device"] == "cpu" and data["torch"] == torch.__version__ and data["dry_run"]
        assert data["figures"], name
        for figure in data["figures"].values():
            assert figure["dtype"] in ("float32", "bfloat16"), (name, figure)
        assert f"(cpu · torch {torch.__version__} · " in log       # each figure's line names them
        assert f"== {name}: exit 0" in log


def test_exactness_speculative_equals_plain_for_every_k_and_rollback(dry_run):
    exact = dry_run[1]["exact"]["figures"]
    assert exact["logits against transformers: relative gap"]["ok"]
    checks = {name: f for name, f in exact.items() if name.endswith(": identical")}
    assert len(checks) == 2 * 2 * 4 * 2          # float32 and bfloat16, greedy and sampled, k 1-4, both rollbacks
    assert all(f["value"] is True for f in checks.values())
    assert dry_run[1]["exact"]["identical"] is True
    skipped = dry_run[1]["exact"]["skipped"]       # the compiled lanes say why the dry run leaves them out
    assert set(skipped) == {"CUDA graphs float32", "ahead of time float32", "CUDA graphs bfloat16",
                            "ahead of time bfloat16"}


def test_decode_verify_race_and_memory_hold_their_figures(dry_run):
    steps = dry_run[1]
    decode = steps["decode"]["figures"]
    assert decode["eager"]["value"] > 0 and decode["compiled"]["value"] > 0
    assert decode["compiled"]["vs_eager"] > 0 and decode["compiled: the same tokens as eager"]["value"] is True
    assert decode["floor: the matmuls alone"]["value"] > 0 and decode["weights"]["value"] > 0
    assert "ahead of time" in steps["decode"]["skipped"]
    verify = steps["verify"]["figures"]
    assert all(verify[f"eager: verify of {t} tokens"]["value"] > 0 for t in (2, 3, 4))
    race = steps["race"]["figures"]
    assert len(race) == 8                          # hit 0.9 and 0.5; k = 1, 2, 3 and auto
    for rate in (0.9, 0.5):
        for k in (1, 2, 3, "auto"):
            lane = race[f"hit {rate} k={k}: speed-up"]
            assert lane["value"] > 0 and lane["predicted"] > 0 and lane["identical"] is True
    memory = steps["memory"]["figures"]
    assert memory["GPU memory peak, eager decoding (plain, k=3)"]["value"] is None     # no GPU in the dry run
    assert memory["weights (model and head)"]["value"] > 0
    page = steps["page"]["figures"]
    assert len(page) == 2 and all(f["value"] > 0 and f["identical"] for f in page.values())
