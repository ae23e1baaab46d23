"""The step-through view's state machine on runs recorded from tiny models (demo.stepper: steps, recording,
panels and ui's plain functions): walking the steps, end of generation, a stop token mid-round, k > 1, sampling, and the
skip-the-restore proof."""
import pytest
import torch

from demo.stepper import panels as stepper_html, recording as stepper_run, steps as stepper, ui as stepper_ui
from demo.stepper.steps import Settings
from stepper_models import FakeChat, counting_model, random_model

PROMPT = torch.tensor([[5, 9, 10]])


def record(model_pair, chat=None, **settings):
    model, mtp = model_pair
    return stepper_run.record_run(model, mtp, chat or FakeChat(), PROMPT, Settings(prompt="p", **settings), "tiny")


@pytest.fixture(scope="module")
def counting():
    return counting_model()


@pytest.fixture(scope="module")
def rand():
    return random_model()


def test_steps_are_prefill_then_guess_verify_accept_per_round(rand):
    run = record(rand, k=2, max_new_tokens=6)
    rounds = len(run.records) - 1
    assert stepper.n_steps(run) == 1 + 3 * rounds
    assert stepper.where(run, 0) == (0, "prefill")
    assert [stepper.where(run, s) for s in (1, 2, 3, 4)] == [(1, "guess"), (1, "verify"), (1, "accept"), (2, "guess")]
    step = 0
    for _ in range(5):
        step = stepper.next_step(run, step)
    assert step == 5 and stepper.prev_step(run, step) == 4
    assert stepper.prev_step(run, 0) == 0
    assert stepper_ui.moved(stepper_ui.Session(run, step=5), "reset").step == 0


def test_next_at_the_end_stays_and_says_done(rand):
    run = record(rand, k=1, max_new_tokens=4)
    last = stepper.n_steps(run) - 1
    assert stepper.at_end(run, last) and stepper.next_step(run, last) == last
    heading = stepper_html.phase_heading(run, last, "English")
    assert 'data-done="true"' in heading and "Done" in heading
    assert 'data-done="false"' in stepper_html.phase_heading(run, last - 1, "English")
    assert stepper.emitted_count(run, last) == len(run.output_ids) == 4
    assert run.ended == "length"


def test_a_one_token_run_is_just_the_prefill(rand):
    run = record(rand, k=2, max_new_tokens=1)
    assert len(run.records) == 1 and stepper.n_steps(run) == 1 and stepper.at_end(run, 0)
    out = dict(zip(stepper_ui.VIEW, stepper_ui.render(stepper_ui.Session(run), "English")))
    assert 'data-phase="prefill"' in out["heading"] and 'data-done="true"' in out["heading"]
    assert out["bottom"] is not None


def test_tokens_appear_only_at_the_accept_phase(rand):
    run = record(rand, k=2, max_new_tokens=8)
    seen = [stepper.emitted_count(run, s) for s in range(stepper.n_steps(run))]
    assert seen[0] == 1                                       # the prefill's first token
    for r in range(1, len(run.records)):
        guess, verify, accept = (stepper.step_of(r, p) for p in stepper.PHASES)
        assert seen[guess] == seen[verify] == seen[guess - 1]
        assert seen[accept] == seen[verify] + len(run.records[r]["emitted"])
    assert seen[-1] == len(run.output_ids)


def test_k3_on_a_model_that_always_guesses_right_accepts_everything(counting):
    run = record(counting, k=3, max_new_tokens=9)
    assert run.output_ids == list(range(11, 20))              # the counting model counts on from the prompt's 10
    rec = run.records[1]
    assert rec["accepted"] == 3 and not rec["rolled_back"]
    assert [e["origin"] for e in rec["emitted"]] == ["draft"] * 3 + ["bonus"]
    assert rec["states"]["after_verify"]["kv"] == [rec["states"]["before"]["kv"][0] + 4]
    assert rec["states"]["after"]["kv"] == rec["states"]["after_verify"]["kv"]         # nothing truncated
    status = stepper.layer_status(rec, "accept")
    assert "truncated" not in status[:-1] and set(status[:-1]) == {"selected", "kept"}


def test_a_stop_token_mid_round_ends_the_run_there(counting):
    run = record(counting, chat=FakeChat(stop=(13,)), k=3, max_new_tokens=20)
    assert run.output_ids == [11, 12, 13] and run.ended == "stop"
    rec = run.records[-1]
    assert rec["accepted"] == 3 and len(rec["emitted"]) == 2             # decided 4 tokens, emitted 2
    assert stepper.at_end(run, stepper.step_of(len(run.records) - 1, "accept"))
    assert "stop token" in stepper_html.explanation(run, stepper.n_steps(run) - 1, "English")


def test_a_rejected_round_truncates_kv_and_restores_or_selects_memory(rand):
    for rollback, memory in (("select", "selected"), ("recompute", "restored"), ("none", "dirty")):
        run = record(rand, k=2, max_new_tokens=6, rollback=rollback)
        rec = next(r for r in run.records[1:] if r["rolled_back"])
        status = stepper.layer_status(rec, "accept")
        kinds = [la["kind"] for la in rec["states"]["after"]["layers"]]
        assert {s for s, kind in zip(status, kinds) if kind == "attention"} == {"truncated"}
        assert {s for s, kind in zip(status, kinds) if kind == "deltanet"} == {memory}
        assert rec["states"]["after"]["kv"][0] == rec["pos"] + rec["accepted"] + 1


def test_the_explanations_say_what_each_rollback_writes_during_verify(rand):
    """select's verify writes no DeltaNet memory (its writes wait for the check); recompute's writes them all,
    and a rejected round puts them back from the snapshot. The words for each follow the run's rollback."""
    said = {}
    for rollback in ("select", "recompute"):
        run = record(rand, k=2, max_new_tokens=6, rollback=rollback)
        r = run.records.index(next(rec for rec in run.records[1:] if rec["rolled_back"]))
        said[rollback] = [stepper_html.explanation(run, stepper.step_of(r, phase), "English")
                          for phase in ("verify", "accept")]
    assert "no DeltaNet memory" in said["select"][0] and "kept aside" in said["select"][0]
    assert "already wrote the guesses into every layer" in said["recompute"][0]
    assert "accepted tokens' writes are applied" in said["select"][1]
    assert "snapshot" in said["recompute"][1] and "writes" not in said["recompute"][1]


def test_sampling_is_reproducible_with_a_seed_and_shows_the_shared_noise(rand):
    """Sampled runs use shared noise: plain sampling's tokens; the guess and verify phases show each
    side's ranking by log prob + G, and the picks recorded are the tokens emitted."""
    from qwen.sample import generate
    a = record(rand, k=2, max_new_tokens=10, temperature=0.9, seed=7)
    b = record(rand, k=2, max_new_tokens=10, temperature=0.9, seed=7)
    c = record(rand, k=2, max_new_tokens=10, temperature=0.9, seed=8)
    assert a.output_ids == b.output_ids and a.output_ids != c.output_ids
    assert a.output_ids == generate(rand[0], PROMPT, 10, temperature=0.9, seed=7)
    assert all(0 < d["prob"] <= 1 for r in a.records[1:] for d in r["draft"])
    for r in a.records[1:]:
        assert all(d["noise"][0][0] == d["token"] for d in r["draft"])        # the draft's pick leads its ranking
        picks = [v["noise"][0][0] for v in r["verify"]][:len(r["emitted"])]
        assert picks == [e["token"] for e in r["emitted"]]                       # the main model's picks, emitted
    guess = stepper_html.phase_panel(a, stepper.step_of(1, "guess"), "English")
    table = stepper_html.phase_panel(a, stepper.step_of(1, "verify"), "English")
    assert "log q + G" in guess and "log p + G" in table and "★" in table and "min(1, p/q)" not in table
    greedy = stepper_html.phase_panel(record(rand, k=2, max_new_tokens=6), stepper.step_of(1, "verify"), "English")
    assert "log p + G" not in greedy


def test_render_every_step_without_touching_the_model(rand):
    model, mtp = rand
    run = record(rand, k=2, max_new_tokens=5)

    def refuse(*args, **kwargs):
        raise AssertionError("stepping must not run the model")
    model.forward = model.hidden = refuse                      # Prev/Next read the recorded trace only
    try:
        session = stepper_ui.Session(run)
        phases = []
        for _ in range(stepper.n_steps(run) + 1):
            out = stepper_ui.render(session, "中文", dark=True)
            assert len(out) == len(stepper_ui.VIEW) and dict(zip(stepper_ui.VIEW, out))["upper"] is not None
            phases.append(stepper.where(run, session.step)[1])
            session = stepper_ui.moved(session, "next")
        assert phases[:4] == ["prefill", "guess", "verify", "accept"]
        assert "验证" in stepper_ui.render(stepper_ui.Session(run, step=2), "中文")[0]
    finally:
        del model.forward, model.hidden


def test_skipping_the_restore_changes_the_output_and_keeping_it_does_not(rand):
    model, mtp = rand
    proof = stepper_run.skip_restore_proof(model, mtp, FakeChat(), PROMPT, Settings(prompt="p", k=2, max_new_tokens=24),
                                       min_tokens=24)
    assert proof.restored_ok and proof.restored == proof.plain
    assert proof.first_diff is not None and proof.skipped[:proof.first_diff] == proof.plain[:proof.first_diff]
    assert proof.skipped[proof.first_diff] != proof.plain[proof.first_diff]
    assert max(d for d in proof.drift if d is not None) > 0    # the dirty memory really drifted
    html = stepper_html.proof_html(proof, "English", "select")
    assert html.count('class="step-diff') == 1 and f"token {proof.first_diff + 1}" in html


def test_settings_from_the_page_are_clamped_and_an_empty_prompt_is_refused():
    settings, notices = stepper_ui.read_settings("hi", k=9, rollback="bogus", max_new_tokens=10_000, temperature="nan", seed=-1,
                                                watch_layer=3, watch_head=1, raw="yes")
    assert (settings.k, settings.rollback, settings.max_new_tokens, settings.temperature) == (4, "select", 256, 0.0)
    assert settings.raw is True and len(notices) == 5
    with pytest.raises(stepper_ui.InputError):
        stepper_ui.read_settings("   ", k=1, rollback="select", max_new_tokens=8, temperature=0, seed=0, watch_layer=0,
                                 watch_head=0, raw=False)


def test_deep_link_prefills_only_valid_values():
    class Request:
        query_params = {"prompt": "Hello\u202e", "k": "3", "rollback": "recompute", "max_new": "999",
                        "view": "step", "temperature": "abc", "layer": "2"}
    values = stepper_ui.apply_deep_link(Request())
    assert values == {"prompt": "Hello", "k": 3, "rollback": "recompute", "max_new_tokens": 256,
                      "temperature": 0.0, "watch_layer": 2, "view": "step"}
    assert stepper_ui.apply_deep_link(None) == {}


def test_the_stepper_reads_the_race_s_measurement_of_the_same_settings(rand, monkeypatch):
    """One cost model for the page: the terms are measured once per engine, k, rollback and way of picking
    (demo.race.calibrate keeps them), and a recording predicts from those very terms, for any prompt; only
    the prompt's own pass is timed per prompt. Another engine or another k is measured anew."""
    from qwen import costs
    from demo import race as race_module
    model, mtp = rand
    costs.TABLE.forget()
    calls = []
    real = race_module.measure_terms
    monkeypatch.setattr(race_module, "measure_terms", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    run = record(rand, k=2, max_new_tokens=8, rollback="recompute")
    kept = costs.TABLE.get(model, mtp, 2, "recompute", lanes="race")
    assert calls == [1] and run.plain_step_seconds == kept.step
    assert {key: run.costs[key] for key in ("step", "plain_around", "round_around", "verify")} == \
        {key: kept.terms()[key] for key in ("step", "plain_around", "round_around", "verify")}
    other = torch.tensor([[5, 9, 11]])
    mine = stepper_run.record_run(model, mtp, FakeChat(), other, Settings(prompt="p", k=2, max_new_tokens=8,
                                                                       rollback="recompute"), "tiny")
    assert calls == [1] and mine.costs["round_around"] == run.costs["round_around"]    # another prompt: the same terms
    another = random_model()
    assert costs.TABLE.get(*another, 2, "recompute", lanes="race") is None      # another engine: not these terms
    assert costs.TABLE.get(model, mtp, 1, "recompute", lanes="race") is None    # another k




def test_the_guess_says_what_the_draft_scores_and_a_miss_outside_it_reads_as_such():
    """A head with a draft vocabulary: the guess phase names how many tokens it scores and how much of this text
    they hold; a rolled-back round whose correction lies outside them says the head could not have guessed it."""
    model, mtp = random_model()
    V = model.cfg.vocab_size
    plain = record((model, mtp), k=1, max_new_tokens=8)                   # every token scored: nothing to say
    assert plain.draft is None and "draft vocabulary" not in stepper_html.explanation(plain, 1, "English")
    out = plain.output_ids
    mtp.set_draft_vocab([i for i in range(V) if i not in out], model.lm_head)    # no output token can be guessed
    try:
        run = record((model, mtp), k=1, max_new_tokens=8)
    finally:
        mtp.set_draft_vocab(None, model.lm_head)
    assert run.output_ids == out                                          # verification is full-vocabulary
    text = PROMPT[0].tolist() + out
    assert run.draft["scored"] == V - len(set(out)) and run.draft["outside"] == sorted(set(out))
    assert run.draft["coverage"] == sum(i not in out for i in text) / len(text)
    guess = stepper_html.explanation(run, 1, "English")
    assert f"{V - len(set(out)):,} of the {V:,} tokens" in guess and f"{run.draft['coverage']:.0%}" in guess
    assert "草稿词表" in stepper_html.explanation(run, 1, "中文")
    rounds = [r for r, rec in enumerate(run.records) if any(e["origin"] == "correction" for e in rec["emitted"])]
    assert rounds                                                         # every guess missed
    said = stepper_html.explanation(run, 3 * rounds[0], "English")        # that round's accept / roll back step
    assert stepper.where(run, 3 * rounds[0]) == (rounds[0], "accept") and "could not have guessed" in said
