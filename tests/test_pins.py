"""One Python/torch pair for every host: the Space card's python_version and requirements.txt's torch are a pair
Hugging Face's ZeroGPU lists, and the tests run on exactly that pair (what a newcomer installs)."""
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
# ZeroGPU's documentation (checked 2026-12): the torch releases and Pythons a ZeroGPU Space may ask for
ZEROGPU_TORCH = {"2.8.0", "2.9.1", "2.10.0", "2.11.0"}
ZEROGPU_PYTHON = {"3.10.13", "3.12.12"}


def card_python():
    card = (ROOT / "README.md").read_text().split("---")[1]
    return re.search(r'^python_version:\s*"?([\d.]+)"?\s*$', card, re.M).group(1)


def pinned_torch():
    return re.search(r"^torch==([\w.]+)\s*$", (ROOT / "requirements.txt").read_text(), re.M).group(1)


def test_the_card_and_requirements_name_a_pair_zerogpu_lists():
    assert card_python() in ZEROGPU_PYTHON, card_python()
    assert pinned_torch() in ZEROGPU_TORCH, pinned_torch()


def test_the_tests_run_on_the_pinned_pair():
    assert torch.__version__.split("+")[0] == pinned_torch(), (torch.__version__, pinned_torch())
    assert sys.version_info[:2] == tuple(int(p) for p in card_python().split(".")[:2]), sys.version


def test_the_touchpoints_are_written_for_the_pinned_torch():
    from qwen.compiled import internals
    assert pinned_torch().startswith(internals.TESTED_TORCH), internals.TESTED_TORCH
