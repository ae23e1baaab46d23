"""The stepper's tree mode (demo.stepper.treerec and treeview; ui's plain functions): a recorded tree run is the
engine's own output, every recorded number is checked against the plain model run along the row's path (or,
for the pitfall, along the rows in order), and the figures and tables say what the record holds."""
import json
import re

import pytest
import torch

from demo.stepper import steps, treeview as TV, ui as stepper_ui
from demo.stepper.figures import Look
from demo.stepper.steps import deltanet_layers
from demo.stepper.steps import Settings
from demo.stepper.recording import TreeTrace, record_run
from demo.stepper.treerec import TreeNotes
from qwen.trace import grid
from qwen.cache import State
from qwen.mtp import generate_mtp
from qwen.sample import generate
from qwen.trace import Watch
from qwen.tree import parse_tree
from stepper_models import FakeChat, random_model

PROMPT = torch.tensor([[5, 9, 10, 3, 7]])


@pytest.fixture(scope="module")
def pair():
    return random_model(seed=3)


def record(pair, shape="2+1", **settings):
    model, mtp = pair
    return record_run(model, mtp, FakeChat(), PROMPT, Settings(prompt="p", tree=shape, **settings), "tiny")


@pytest.mark.parametrize("shape", ["2+1", "2x2", "2+1+1", "3"])
@pytest.mark.parametrize("rollback", ["select", "recompute"])
def test_a_recorded_tree_run_is_the_engines_output_and_plain_decodings(pair, shape, rollback):
    model, mtp = pair
    run = record(pair, shape, rollback=rollback, max_new_tokens=20)
    tokens, rounds, _ = generate_mtp(model, mtp, PROMPT, 20, tree=shape, rollback=rollback)
    assert run.output_ids == tokens == generate(model, PROMPT, 20)
    assert len(run.records) == rounds + 1 and run.records[0]["kind"] == "prefill"
    assert run.settings.k == parse_tree(shape).depth and steps.n_steps(run) == 1 + 3 * rounds
    json.dumps(run.records)                                               # plain data


def test_seeded_sampling_records_the_text_of_plain_sampling(pair):
    model, _ = pair
    run = record(pair, "2x2", max_new_tokens=16, temperature=0.9, seed=11)
    assert run.output_ids == generate(model, PROMPT, 16, temperature=0.9, seed=11)


def _run_along(model, tokens):
    """The plain model over these ids from scratch: (its logits at the last position, the state after)."""
    state = State(model)
    logits = model(torch.tensor([tokens]), state)
    return logits[0, -1], state


def test_every_recorded_number_matches_the_plain_model_along_the_rows_path(pair):
    model, _ = pair
    run = record(pair, "2x2", max_new_tokens=14)
    L = None
    for rec in run.records[1:4]:
        prefix = run.prompt_ids + run.output_ids[:rec["pos"] - len(run.prompt_ids)]     # tokens before the round
        _, before = _run_along(model, prefix)
        mem = rec["memory"]
        L = deltanet_layers(model.cfg).index(mem["layer"])
        S_before = before.deltanet_layers()[L].S[0, mem["head"]]
        for row in range(len(rec["tokens"])):
            path = parse_tree(rec["parents"][1:]).ancestors(row)
            assert rec["mask"][row] == [int(a in path) for a in range(len(rec["tokens"]))]
            logits, after = _run_along(model, prefix + [rec["tokens"][a] for a in path])
            assert rec["picks"][row] == int(logits.argmax())                               # verdicts from the truth
            want = grid(after.deltanet_layers()[L].S[0, mem["head"]] - S_before)
            assert torch.allclose(torch.tensor(mem["tree"][row]), torch.tensor(want), atol=2e-4)
            # the pitfall: the rows before it, in order, whatever their branch
            in_order, dirty = _run_along(model, prefix + rec["tokens"][:row + 1])
            assert rec["row_picks"][row] == int(in_order.argmax())
            wrong = grid(dirty.deltanet_layers()[L].S[0, mem["head"]] - S_before)
            assert torch.allclose(torch.tensor(mem["row_order"][row]), torch.tensor(wrong), atol=2e-4)
            in_sequence = path == list(range(row + 1))
            assert (rec["mixed"][row] < 1e-4) == in_sequence                # wrong exactly where a sibling came first
        next_token = rec["picks"][rec["path"][-1]]
        assert rec["emitted"][-1]["token"] == next_token and rec["accepted"] == len(rec["path"]) - 1


def test_one_watch_hears_chains_and_trees_and_leaves_the_output_plain(pair):
    model, mtp = pair
    with pytest.raises(ValueError, match="Watch"):
        generate_mtp(model, mtp, PROMPT, 5, k=2, trace=object())
    for shape, rows in (("2+1", 4), (None, 3)):
        heard = []

        class Count(Watch):
            def drafted(self, state, tree, tokens, guesses):
                heard.append(("drafted", state.pos, tokens.shape[1]))

            def rolled_back(self, state, head_cache):
                heard.append(("rolled_back", state.pos))
        tokens, rounds, _ = generate_mtp(model, mtp, PROMPT, 12, k=2, tree=shape, trace=Count())
        assert tokens == generate(model, PROMPT, 12) and len(heard) == 2 * rounds
        assert all(h[2] == rows for h in heard if h[0] == "drafted")


def test_the_trace_records_each_rounds_tree_itself(pair):
    """A TreeTrace writes each round's tree notes into the round's own record as the round ends: no record is
    completed afterwards."""
    model, mtp = pair
    trace = TreeTrace(TreeNotes(model, 0, 0), watch_layer=0, watch_head=0)
    tokens, rounds, _ = generate_mtp(model, mtp, PROMPT, 10, tree="2+1", trace=trace)
    assert tokens == generate(model, PROMPT, 10)
    assert [rec["kind"] for rec in trace] == ["prefill"] + ["tree_round"] * rounds
    for rec in trace[1:]:
        assert len(rec["tokens"]) == len(rec["parents"]) == len(rec["mask"]) == len(rec["windows"]) == 4
        assert rec["next_token"] == rec["picks"][rec["path"][-1]] and rec["memory"]["head"] == 0


def test_the_figures_say_what_the_record_holds(pair):
    run = record(pair, "2+1", max_new_tokens=16)
    rec = next(r for r in run.records[1:] if max(r["mixed"]) > 0)
    n = len(rec["tokens"])
    for lang in ("English", "中文"):
        for look in (Look(lang=lang), Look(lang=lang, narrow=True), Look(lang=lang, presenter=True, dark=True)):
            guess = TV.tree_figure(run, rec, "guess", look)
            nodes = next(d for d in guess.data if d.name == "nodes")
            assert [m.split()[0] for m in nodes.text[1:]] == ["?"] * (n - 1)
            accept = TV.tree_figure(run, rec, "accept", look)
            nodes = next(d for d in accept.data if d.name == "nodes")
            marks = [TV.MARKS[v] for v in TV.verdicts(rec, "accept")]
            assert [re.sub("<[^>]+>", "", s).split()[0] for s in nodes.text[1:]] == marks[1:]
            assert [v for v in TV.verdicts(rec, "accept")].count("accepted") == rec["accepted"]
            assert any(d.name == "winner" for d in accept.data)
            mask = next(d for d in TV.mask_figure(run, rec, "verify", look).data if d.name == "tree")
            for r in range(n):
                for c in range(n):
                    sibling = c < r and c not in parse_tree(rec["parents"][1:]).ancestors(r)
                    assert (mask.text[r][c] == "✗") == sibling and (mask.text[r][c] == "✓") == bool(rec["mask"][r][c])
            mem = TV.node_memories(run, rec, "guess", look)
            assert len([d for d in mem.data if d.type == "heatmap"]) == 2 * n and not any(d.visible for d in mem.data)
            mem = TV.node_memories(run, rec, "accept", look)
            assert all(d.visible for d in mem.data)
            titles = [a.text for a in mem.layout.annotations if a.name == "panel-title"]
            star = [x for x in titles if "★" in x]
            assert len(star) == 1 and star[0].startswith(f"{rec['path'][-1]}:")
            slots = TV.slots_figure(run, rec, "accept", look).data[0]
            assert list(slots.z[1]) == [2] * len(rec["path"]) + [0] * (n - len(rec["path"]))
            window = TV.window_figure(run, rec, "verify", look).data[0]
            assert sum("✗" in cell for row in window.text for cell in row) > 0    # row order reads other inputs


def test_the_tree_mode_walks_every_step_in_both_languages_and_says_what_it_cannot_do(pair):
    settings, notices = stepper_ui.read_settings("p", k=4, rollback="select", max_new_tokens=12, temperature=0, seed=0,
                                                 watch_layer=-1, watch_head=-1, raw=True, tree="2+1+1")
    assert settings.tree == "2+1+1" and settings.k == 3 and not notices
    bad, notices = stepper_ui.read_settings("p", k=2, rollback="select", max_new_tokens=12, temperature=0, seed=0,
                                            watch_layer=-1, watch_head=-1, raw=True, tree="5x5")
    assert bad.tree == "" and [n.key for n in notices] == ["bad_choice"]
    run = record(pair, "2x2", max_new_tokens=10)
    session = stepper_ui.new_session(run)
    for lang in ("English", "中文"):
        for step in range(steps.n_steps(run)):
            out = dict(zip(stepper_ui.VIEW, stepper_ui.render(stepper_ui.replace(session, step=step), lang,
                                                              narrow=step % 2)))
            heading, text, panel, explain = out["heading"], out["text"], out["panel"], out["explain"]
            r, phase = steps.where(run, step)
            assert f'data-phase="{phase}"' in heading
            if phase != "prefill":
                assert all(out[slot] for slot in ("beside", "upper", "left", "middle", "right"))  # tree, memory, mask,
                assert out["lower_left"] is None and out["bottom_caption"] == ""    # windows, slots; no costs drawn
            if phase == "verify":
                assert panel.count("<tr") == len(run.records[r]["tokens"]) + 1
    assert (stepper_ui.controls_of(run)["tree"], stepper_ui.controls_of(run)["auto"]) == ("2x2", False)


def test_a_deep_link_may_ask_for_a_tree():
    class Request:
        query_params = {"view": "step", "tree": "2+1", "k": "3"}
    assert stepper_ui.apply_deep_link(Request())["tree"] == "2+1"
    Request.query_params = {"tree": "9x9"}
    assert "tree" not in stepper_ui.apply_deep_link(Request())


def test_a_tree_run_exports_and_imports_as_a_trace_file_and_a_bad_tree_is_refused(pair, tmp_path):
    from demo.stepper import traceio
    run = record(pair, "2x2", max_new_tokens=12)
    back = traceio.read_trace(traceio.write_trace(run, str(tmp_path)))
    assert back.replay and back.settings.tree == "2x2" and back.records == run.records
    assert back.output_ids == run.output_ids == generate(pair[0], torch.tensor([run.prompt_ids]), 12)
    session = stepper_ui.new_session(back)
    for step in range(steps.n_steps(back)):                      # every step of the imported run draws
        out = dict(zip(stepper_ui.VIEW, stepper_ui.render(stepper_ui.replace(session, step=step), "English")))
        assert 'data-phase="' in out["heading"]
    data = traceio.to_dict(run)
    at = next(i for i, r in enumerate(run.records) if r.get("kind") == "tree_round" and len(r["path"]) < 3)

    def refused(change, words):
        bad = json.loads(json.dumps(data))
        change(bad["records"][at])
        with pytest.raises(traceio.TraceError, match=words):
            traceio.from_dict(bad)
    refused(lambda r: r["mask"][1].__setitem__(2, 1), "mask")                      # a sibling made visible
    refused(lambda r: r.__setitem__("parents", [-1, 0, 1, 2, 3, 4, 5]), "parents")  # not the run's tree
    refused(lambda r: r["path"].append(6), "path")                                  # no walk goes there
    refused(lambda r: r.__setitem__("next_token", r["next_token"] + 1), "accepted")
    refused(lambda r: r["windows"][0].__setitem__(0, 5), "windows")


@pytest.mark.parametrize("shape", ["2+1", "2x2"])
def test_skipping_the_restore_on_a_tree_keeps_a_sibling_branchs_memory_and_goes_wrong(pair, shape):
    from demo.stepper import panels
    from demo.stepper.recording import skip_restore_proof
    model, mtp = pair
    settings = Settings(prompt="p", tree=shape, k=parse_tree(shape).depth, max_new_tokens=32)
    proof = skip_restore_proof(model, mtp, FakeChat(), PROMPT, settings, min_tokens=32)
    assert proof.restored_ok and proof.restored == proof.plain == generate(model, PROMPT, len(proof.plain))
    assert proof.first_diff is not None and proof.skipped[proof.first_diff] != proof.plain[proof.first_diff]
    assert max(d for d in proof.drift if d is not None) > 0    # the dirty memory really drifted
    assert f"token {proof.first_diff + 1}" in panels.proof_html(proof, "English", "select")
