"""A guard for torch's compiler configuration (inductor's and dynamo's), used by conftest.py.

Tests that change torch's config must undo the change themselves, through
`torch._inductor.config.patch(...)` or `unittest.mock.patch.object`. pytest's monkeypatch is not
safe here: under pytest 9.2 its undo *deletes* a config key (`torch._inductor.config.cpp.cxx does
not exist`), and every later compile in the process then fails, far from the culprit.

    before = snapshot()
    ...                                  # a test runs
    leaks = changed(before, snapshot())  # {"cpp.cxx": "deleted", "debug": "False -> True"}
    restore(before)

conftest.py makes torch_config_restored (below) autouse for every test. The engine sets a few keys process-wide on purpose (ENGINE_OWNED): those may change, but must stay
readable.
"""
import warnings

import pytest
import torch._dynamo.config
import torch._inductor.config

CONFIGS = {"inductor": torch._inductor.config, "dynamo": torch._dynamo.config}
# keys the engine sets for the whole process when it prepares compiled passes (qwen/compiled/internals.py:
# configure_dynamo); cache_size_limit is an alias of recompile_limit
ENGINE_OWNED = {("dynamo", "cache_size_limit"), ("dynamo", "recompile_limit"), ("dynamo", "automatic_dynamic_shapes"),
                ("dynamo", "enable_aot_compile")}
DELETED = object()
# the keys, read once while every key is there (get_config_copy itself fails once a key is deleted)
KEYS = {name: list(config.get_config_copy()) for name, config in CONFIGS.items()}


def snapshot():
    """-> {(config, key): value, or DELETED where reading the key fails}"""
    values = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # reading a deprecated key warns
        for name, config in CONFIGS.items():
            for key in KEYS[name]:
                try:
                    values[(name, key)] = getattr(config, key)
                except AttributeError:
                    values[(name, key)] = DELETED
    return values


def changed(before, after):
    """-> {"inductor.cpp.cxx": "deleted", ...}: what differs, engine-owned keys only when deleted."""
    leaks = {}
    for where, old in before.items():
        new = after.get(where, DELETED)
        if new is DELETED and old is not DELETED:
            leaks[".".join(where)] = "deleted"
        elif where not in ENGINE_OWNED and new is not old and not _equal(new, old):
            leaks[".".join(where)] = f"{old!r} -> {new!r}"
    return leaks


def restore(before):
    for (name, key), value in before.items():
        if value is not DELETED:
            setattr(CONFIGS[name], key, value)


def _equal(a, b):
    try:
        return bool(a == b)
    except Exception:
        return False


@pytest.fixture(autouse=True)
def torch_config_restored():
    """Fails the test that changes inductor's or dynamo's config without restoring it, and restores it,
    so the tests after it run as they would alone."""
    before = snapshot()
    yield
    leaks = changed(before, snapshot())
    if leaks:
        restore(before)
        pytest.fail(f"this test changed torch's compiler config without restoring it: {leaks}", pytrace=False)
