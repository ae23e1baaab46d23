import os
import socket
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_config_guard import torch_config_restored  # noqa: E402,F401  (autouse: every test)
torch.set_num_threads(1)   # tiny models: one thread is fastest, and leaves a core free
# the app's models stay eager (compiling takes minutes on 2 cores); tests/test_compile.py compiles on purpose
os.environ.setdefault("QWEN_COMPILE", "0")
# compiling stays in the test's process unless a test asks for helper processes (test_compile_workers.py)
os.environ.setdefault("QWEN_COMPILE_WORKERS", "1")
# a race's unseen repeats and the measuring of its cost terms get a tenth of their time: no fast test asserts on
# stable timings (the quiet tests, which do, get the page's budgets back: full_race_budgets below)
os.environ.setdefault("QWEN_RACE_REPEAT_SECONDS", "0.5")
os.environ.setdefault("QWEN_CALIBRATE_SECONDS", "0.15")


@pytest.fixture(autouse=True)
def full_race_budgets(request, monkeypatch):
    """A quiet test times races as the page does: the page's repeat and calibration budgets (demo.environment)."""
    if request.node.get_closest_marker("quiet"):
        monkeypatch.delenv("QWEN_RACE_REPEAT_SECONDS", raising=False)
        monkeypatch.delenv("QWEN_CALIBRATE_SECONDS", raising=False)


# The two files that compile the most, first: the two test processes take whole files in collection order
# (pytest.ini: --dist loadfile), so each starts on one of them and the shorter files fill in around them,
# instead of both ending on a long cold compile. (tests/test_compile.py: the random model's fixture;
# tests/test_compile_saved.py: the embedded model's; tests/test_compile_ahead.py: packages built ahead of time;
# in the fast suite, tests/test_serving.py: the whole app under bad input and many visitors.)
LONGEST_FIRST = ("test_compile.py", "test_compile_saved.py", "test_compile_ahead.py", "test_serving.py")


def pytest_collection_modifyitems(items):
    first = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))      # stable: each file's order kept


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_url():
    """The whole app (app.py's `demo`) launched once per test session on a free loopback port, with the
    launch options a real deployment uses (demo.page.serve, less its torch threads: one here); heartbeats
    every 0.5 s so a closed client is noticed at once."""
    from demo import environment, page, serving
    environment.notice_closed_pages_within(0.5)
    import app
    serving.SWEEP_SECONDS = 0.5             # the idle-session sweep (its TTL stays at an hour unless a test lowers it)
    app.store.preload()
    port = free_port()
    app.demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                    **page.launch_options())
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        app.demo.close()
