"""The stepper and the race tell one story: on the embedded model, compiled as the app compiles it, the
speed-up the stepper's what-if marks for "this run" is the one the race predicts for the same prompt, k and
rollback (both from demo.costs: this host's costs, measured once by the race and read by the stepper, and
each run's own tokens per round, which must agree)."""
import pytest

from demo import models, race
from demo.prompts import DEFAULT_EXAMPLE, prepare
from demo.settings import max_prompt_tokens
from demo.stepper import figures, recording, ui
from demo.validate import RaceSettings
from qwen.compiled import Phase, host, warmup
from qwen.weights import EMBEDDED

pytestmark = pytest.mark.compile               # see pytest.ini
needs_compiler = pytest.mark.skipif(host.compiler_missing() is not None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def compiled():
    loaded = models.load_model(models.EMBEDDED_KEY, EMBEDDED, compile=False)
    report = warmup.warm_up(loaded.model, loaded.mtp, ks=(2,))        # what models.start_compiling runs
    assert report["status"].phase is Phase.COMPILED, report
    loaded.views = loaded.serving = report["model"], report["head"]   # and how it leaves the model served
    return loaded


@needs_compiler
@pytest.mark.parametrize("rollback", ["select", "recompute"])
def test_the_stepper_predicts_the_speedup_the_race_predicts(compiled, rollback):
    _, prompt, raw, _ = DEFAULT_EXAMPLE
    settings = RaceSettings(prompt, 48, 2, rollback, 0.0, 0, raw, False, [])
    ids, _ = prepare(compiled, settings, max_prompt_tokens())
    done = list(race.race(compiled, ids, settings))[-1]
    raced = race.summary(compiled.key, done.plain, done.spec, settings, measured=done.costs)
    # the stepper, as its Start button runs it: read the controls, encode, record, draw
    step_settings, _ = ui.read_settings(prompt, 2, rollback, 48, 0.0, 0, 0, 0, raw)
    step_ids, _ = ui.encode(compiled, step_settings)
    run = recording.record_run(*compiled.engine(), compiled.chat, step_ids, step_settings, compiled.key)
    view = dict(zip(ui.VIEW, ui.render(ui.Session(run), "English")))
    marker = next(t for t in view["whatif"].data if t.name.startswith("this run: a = "))
    assert run.output_ids == raced["speculative"]["ids"]                   # the same tokens in the same rounds
    assert len(run.records) - 1 == raced["speculative"]["rounds"]
    stepper, racer = marker.y[0], raced["predicted_speedup"]
    print(f"{rollback}: stepper predicts {stepper:.3f}x, race predicts {racer:.3f}x "
          f"(measured race {raced['speedup']:.3f}x; stepper costs {run.costs}, race costs {raced['costs']})")
    assert stepper == pytest.approx(figures.this_run_speedup(run))
    assert abs(stepper / racer - 1) <= 0.10
