"""The autouse guard in conftest.py names the test that leaves torch's compiler config changed,
and restores the config so the tests after it are unaffected."""
import os

import pytest

from qwen.compiled import internals

HERE = os.path.dirname(os.path.abspath(__file__))

LEAKY_TESTS = '''
import pytest
import torch


def test_leaks_a_value():
    torch._inductor.config.max_autotune = not torch._inductor.config.max_autotune


def test_leaks_by_deleting_a_key():
    pytest.MonkeyPatch().delattr(torch._inductor.config.cpp, "cxx")     # what pytest 9.2's undo did


def test_restores_through_inductors_patch():
    with torch._inductor.config.patch({"cpp.cxx": (None, "g++"), "max_autotune": True}):
        assert torch._inductor.config.max_autotune


def test_runs_after_the_leaks_with_the_config_restored():
    assert torch._inductor.config.max_autotune is False
    assert torch._inductor.config.cpp.cxx is not None
'''


@pytest.mark.skipif(not internals.applies(), reason=f"restoring a deleted key is written for torch {internals.TESTED_TORCH}x")
def test_the_guard_fails_exactly_the_tests_that_leak(pytester):
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {HERE!r})\nfrom torch_config_guard import torch_config_restored\n")
    pytester.makepyfile(test_leaky=LEAKY_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=4, errors=2)
    out = result.stdout.str()
    assert "ERROR at teardown of test_leaks_a_value" in out and "inductor.max_autotune" in out
    assert "ERROR at teardown of test_leaks_by_deleting_a_key" in out and "'inductor.cpp.cxx': 'deleted'" in out
