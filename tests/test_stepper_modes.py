"""The stepper's modes (demo.stepper.modes): for a chain run, a tree run and a k="auto" run recorded on the tiny
models, which view each slot of the page draws, by name and by what the page is sent, in both languages. The
tables are what the page showed before the modes were one interface (ui.py branching on the run's kind): the chain's
layer map beside the text, its memory across the page, and so on; a tree's tree, node memories, conv windows, mask
and KV slots in the same places; k="auto" the chain's but for its round's choice of length at the bottom."""
import pytest
import torch
from plotly.basedatatypes import BaseFigure

from demo.stepper import figures, modes, recording, steps
from demo.stepper import panels as H
from demo.stepper import treeview as TV
from demo.stepper import ui as stepper_ui
from demo.stepper.decision import decision_caption, decision_figure
from demo.stepper.drawn import figure_html
from demo.stepper.figures import Look
from demo.stepper.steps import Settings
from demo.choices import AUTO_MAX_K
from qwen.adaptive import DraftLengths
from stepper_models import FakeChat, random_model

LANGS = ("English", "中文")


def conv_strip(run, rec, phase, look, scales):
    """The chain's conv strip as the page drew it: each state's columns labelled with their tokens."""
    columns = len((rec["states"].get("after") or rec["states"]["before"])["conv"][0])
    labels = {w: figures.conv_labels(run, rec, w, columns) for w in rec["states"]}
    return figures.conv_strip(rec, phase, labels, look, scales["conv"])


# slot -> (the view's name, what the page is sent there: f(run, r, phase, look, scales)) at a round's phase
CHAIN = {
    "beside": ("layer_map", lambda run, r, phase, look, sc: figures.layer_map(run.records[r], phase, look)),
    "upper": ("memory", lambda run, r, phase, look, sc: figures.memory_heatmaps(run.records[r], phase, look, sc,
                                                                                run.settings.rollback)),
    "middle": ("conv", lambda run, r, phase, look, sc: conv_strip(run, run.records[r], phase, look, sc)),
    "left": ("memory_change", lambda run, r, phase, look, sc: figures.memory_change(run.records[r], phase, look)),
    "right": ("kv_lengths", lambda run, r, phase, look, sc: figures.kv_lengths(run.records[r], phase, look)),
    "lower_left": ("costs", lambda run, r, phase, look, sc: figures.cost_stack(run, r or None, look)),
    "lower_right": ("acceptance", lambda run, r, phase, look, sc: figures.acceptance_over_run(run.records, r or None,
                                                                                              look)),
    "bottom": ("what_if", lambda run, r, phase, look, sc: figures.what_if(run, look)),
    "bottom_caption": ("what_if_caption", lambda run, r, phase, look, sc: figures.whatif_caption(run, look.lang)),
    "heading": ("heading", lambda run, r, phase, look, sc: H.phase_heading(run, steps.step_of(r, phase), look.lang)),
    "text": ("text", lambda run, r, phase, look, sc: H.text_so_far(run, steps.step_of(r, phase), look.lang)),
    "panel": ("panel", lambda run, r, phase, look, sc: H.phase_panel(run, steps.step_of(r, phase), look.lang)),
    "explain": ("explanation", lambda run, r, phase, look, sc: H.explanation(run, steps.step_of(r, phase), look.lang)),
}
AUTO = {
    **CHAIN,
    "bottom": ("decision", lambda run, r, phase, look, sc: decision_figure(run.records[r], look)),
    "bottom_caption": ("decision_caption", lambda run, r, phase, look, sc: decision_caption(run.records[r],
                                                                                            look.lang)),
}
TREE = {
    "heading": CHAIN["heading"],
    "beside": ("tree", lambda run, r, phase, look, sc: TV.tree_figure(run, run.records[r], phase, look)),
    "upper": ("node_memories", lambda run, r, phase, look, sc: TV.node_memories(run, run.records[r], phase, look,
                                                                                sc["nodes"])),
    "middle": ("conv_windows", lambda run, r, phase, look, sc: TV.window_figure(run, run.records[r], phase, look)),
    "left": ("mask", lambda run, r, phase, look, sc: TV.mask_figure(run, run.records[r], phase, look)),
    "right": ("kv_slots", lambda run, r, phase, look, sc: TV.slots_figure(run, run.records[r], phase, look)),
    "lower_left": ("nothing", lambda *a: None),
    "lower_right": ("nothing", lambda *a: None),
    "bottom": ("nothing", lambda *a: None),
    "bottom_caption": ("nothing", lambda *a: ""),
    "text": ("tree_text", lambda run, r, phase, look, sc: H.text_so_far(
        run, steps.step_of(r, phase), look.lang, TV.pending_chips(run, run.records[r], phase, look.lang))),
    "panel": ("tree_panel", lambda run, r, phase, look, sc: TV.panel_html(run, run.records[r], phase, look.lang)),
    "explain": ("tree_explanation", lambda run, r, phase, look, sc: TV.explanation(run, run.records[r], phase,
                                                                                   look.lang)),
}
# a tree run's prefill: no tree yet, the chain's words and no figure
TREE_PREFILL = {**{slot: ("nothing", lambda *a: None) for slot in modes.FIGURES},
                "bottom_caption": ("nothing", lambda *a: ""),
                **{slot: CHAIN[slot] for slot in modes.WORDS}}
CHAIN_PREFILL = CHAIN


@pytest.fixture(scope="module")
def rand():
    return random_model()


@pytest.fixture(scope="module")
def chain_run(rand):
    model, mtp = rand
    return recording.record_run(model, mtp, FakeChat(), torch.tensor([[5, 9, 10]]),
                                Settings(prompt="p", k=2, max_new_tokens=6), "tiny")


@pytest.fixture(scope="module")
def tree_run():
    model, mtp = random_model(seed=3)
    return recording.record_run(model, mtp, FakeChat(), torch.tensor([[5, 9, 10, 3, 7]]),
                                Settings(prompt="p", tree="2+1", max_new_tokens=6), "tiny")


@pytest.fixture(scope="module")
def auto_run(rand):
    model, mtp = rand
    lengths = recording.lengths_for
    recording.lengths_for = lambda *a: DraftLengths((1.0, 1.02, 1.04, 1.06))    # cheap guesses: the head drafts
    try:
        return recording.record_run(model, mtp, FakeChat(), torch.tensor([[5, 9, 10]]),
                                    Settings(prompt="p", k=AUTO_MAX_K, auto=True, max_new_tokens=6), "tiny")
    finally:
        recording.lengths_for = lengths


def sent(value):
    """What the page is sent for a view's value (a figure: the HTML the page draws it from)."""
    return figure_html(value) if isinstance(value, BaseFigure) else value


def check(run, expected, prefill):
    """Every slot, at the prefill and every phase of the first round, in both languages: the mode names the view the
    table expects, and the page is sent what the table's function draws."""
    mode = modes.mode_of(run)
    scales = mode.scales(run)
    for lang in LANGS:
        look = Look(lang=lang)
        for step in range(min(4, steps.n_steps(run))):
            r, phase = steps.where(run, step)
            table = prefill if phase == "prefill" else expected
            assert set(table) == set(modes.SLOTS)
            views = mode.views(run, step, look, scales)
            assert set(views) == set(modes.SLOTS)
            assert all(v.changes in modes.CHANGES for v in views.values())
            out = dict(zip(stepper_ui.VIEW, stepper_ui.render(stepper_ui.Session(run, step=step, scales=scales), lang)))
            for slot, (name, draw) in table.items():
                assert views[slot].name == name, (mode.name, step, slot)
                assert out[slot] == sent(draw(run, r, phase, look, scales)), (mode.name, lang, step, slot, name)


def test_a_chain_run_draws_the_chains_views_in_each_slot(chain_run):
    assert modes.mode_of(chain_run) is modes.CHAIN
    check(chain_run, CHAIN, CHAIN_PREFILL)


def test_a_tree_run_draws_the_trees_views_in_the_same_slots(tree_run):
    assert modes.mode_of(tree_run) is modes.TREE
    assert tree_run.records[1]["kind"] == "tree_round"
    check(tree_run, TREE, TREE_PREFILL)


def test_an_auto_run_draws_the_chains_views_but_its_rounds_choice_at_the_bottom(auto_run):
    assert modes.mode_of(auto_run) is modes.AUTO
    check(auto_run, AUTO, {**CHAIN_PREFILL, **{slot: AUTO[slot] for slot in ("bottom", "bottom_caption")}})


def test_the_slots_are_where_the_page_drew_each_view(chain_run):
    """The page's boxes keep their element ids (the browser tests and the page's script find them by these), and
    each redraw sends the slots in the order the step_* events have always returned them."""
    assert stepper_ui.VIEW == ("heading", "text", "panel", "explain", "beside", "upper", "left", "middle", "right",
                               "lower_left", "lower_right", "bottom", "bottom_caption")
    assert stepper_ui.FIGURE_BOXES == {"beside": "stepper-layers", "upper": "stepper-memory",
                                       "middle": "stepper-conv", "left": "stepper-change", "right": "stepper-kv",
                                       "lower_left": "stepper-cost", "lower_right": "stepper-acceptance",
                                       "bottom": "stepper-whatif"}
    # what each slot's view changes with decides what a step sends again: the chain's run-wide figures once
    views = modes.CHAIN.views(chain_run, 1, Look(), modes.CHAIN.scales(chain_run))
    assert {slot: v.changes for slot, v in views.items()} == {
        "heading": "step", "text": "step", "panel": "step", "explain": "step", "beside": "phase", "upper": "phase",
        "left": "phase", "middle": "phase", "right": "phase", "lower_left": "round", "lower_right": "round",
        "bottom": "run", "bottom_caption": "run"}
