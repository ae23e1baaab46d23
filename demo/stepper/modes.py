"""The stepper's modes: a chain of k, a draft tree and k="auto", each saying which view fills each slot of the page.

The page (demo.stepper.ui) has fixed places, its slots, named by where they are, not by what one mode draws there:

    heading                              the phase, the round and the step
    explain                              the phase in words
    text, panel   | beside               the text so far, the phase's table | a figure beside them
    upper                                a figure across the page
    middle                               another one under it
    left          | right                two figures side by side
    lower_left    | lower_right          two more
    bottom                               a figure across the page
    bottom_caption                       the words under it

A mode (Mode.views) gives every slot a View: its name, what it changes with ("step": sent at every step; "phase",
"round", "run": sent again only when that changes) and how to draw it (a plotly figure, HTML or Markdown; None or "":
nothing). The figure slots, by mode (the words slots: the chain's words, a tree round's own in tree mode):

    slot            chain            tree             auto
    beside          layer_map        tree             layer_map
    upper           memory           node_memories    memory
    middle          conv             conv_windows     conv
    left            memory_change    mask             memory_change
    right           kv_lengths       kv_slots         kv_lengths
    lower_left      costs            nothing          costs
    lower_right     acceptance       nothing          acceptance
    bottom          what_if          nothing          decision
    bottom_caption  what_if_caption  nothing          decision_caption

A tree run's prefill has no tree yet: its figure slots draw nothing. Which mode a run is drawn in: mode_of(run).

    views = mode_of(run).views(run, step, Look(), mode_of(run).scales(run))
    views["beside"].name        # -> "tree" for a tree run, "layer_map" for a chain's
    figure = views["beside"].draw()
"""
from typing import Callable, NamedTuple

from demo.stepper import figures, steps
from demo.stepper import panels as H
from demo.stepper import treeview as TV
from demo.stepper.decision import decision_caption, decision_figure

WORDS = ("heading", "text", "panel", "explain")
FIGURES = ("beside", "upper", "left", "middle", "right", "lower_left", "lower_right", "bottom")
# every output of the view, in the order each redraw sends them (the step_* events' outputs, as their API has always
# returned them: not quite the page's order)
SLOTS = WORDS + FIGURES + ("bottom_caption",)
CHANGES = ("step", "phase", "round", "run")          # what a view changes with (View.changes)


class View(NamedTuple):
    """What one slot shows at one step: its name (the table above), what it changes with (one of CHANGES) and a
    function drawing it."""
    name: str
    changes: str
    draw: Callable


def nothing(changes, empty=None):
    """A slot left empty (a figure slot: None, a caption: "")."""
    return View("nothing", changes, lambda: empty)


def chain_words(run, step, lang):
    """The words slots as a chain's round says them (demo.stepper.panels), redrawn at every step."""
    return {"heading": View("heading", "step", lambda: H.phase_heading(run, step, lang)),
            "text": View("text", "step", lambda: H.text_so_far(run, step, lang)),
            "panel": View("panel", "step", lambda: H.phase_panel(run, step, lang)),
            "explain": View("explanation", "step", lambda: H.explanation(run, step, lang))}


class Mode:
    """One way to draw a recorded run: which view fills each slot (SLOTS) at each step. A mode keeps nothing; the
    page asks it again at every step."""
    name = ""

    def scales(self, run):
        """The colour scales of the run's figures, computed once per run (the page keeps them)."""
        raise NotImplementedError

    def views(self, run, step, look, scales):
        """{slot: View} for every slot at this step; look: a figures.Look; scales: what scales(run) gave."""
        raise NotImplementedError


class ChainMode(Mode):
    """A chain of k drafts a round: the state of every layer, the watched memory and conv window, what verify
    changed and the KV lengths, the run's costs and acceptance, and what another k would have given."""
    name = "chain"

    def scales(self, run):
        return figures.run_scales(run.records)

    def views(self, run, step, look, scales):
        r, phase = steps.where(run, step)
        rec = run.records[r]

        def conv():
            columns = len((rec["states"].get("after") or rec["states"]["before"])["conv"][0])
            labels = {w: figures.conv_labels(run, rec, w, columns) for w in rec["states"]}
            return figures.conv_strip(rec, phase, labels, look, scales["conv"])
        return {
            **chain_words(run, step, look.lang),
            "beside": View("layer_map", "phase", lambda: figures.layer_map(rec, phase, look)),
            "upper": View("memory", "phase",
                          lambda: figures.memory_heatmaps(rec, phase, look, scales, run.settings.rollback)),
            "middle": View("conv", "phase", conv),
            "left": View("memory_change", "phase", lambda: figures.memory_change(rec, phase, look)),
            "right": View("kv_lengths", "phase", lambda: figures.kv_lengths(rec, phase, look)),
            "lower_left": View("costs", "round", lambda: figures.cost_stack(run, r or None, look)),
            "lower_right": View("acceptance", "round", lambda: figures.acceptance_over_run(run.records, r or None,
                                                                                           look)),
            **self.bottom(run, rec, look),
        }

    def bottom(self, run, rec, look):
        """The bottom slot and its caption: what another k would have given this run, drawn once."""
        return {"bottom": View("what_if", "run", lambda: figures.what_if(run, look)),
                "bottom_caption": View("what_if_caption", "run", lambda: figures.whatif_caption(run, look.lang))}


class AutoMode(ChainMode):
    """k="auto": a chain whose rounds choose their length, drawn as a chain but for the bottom slot: this round's
    choice of length, drawn and said (demo.stepper.decision), then how k="auto" chooses."""
    name = "auto"

    def bottom(self, run, rec, look):
        return {"bottom": View("decision", "round", lambda: decision_figure(rec, look)),
                "bottom_caption": View("decision_caption", "round", lambda: decision_caption(rec, look.lang))}


class TreeMode(Mode):
    """A draft tree a round (demo.stepper.treeview): the tree, each node's memory, the conv windows, the
    ancestor mask and the KV slots; a tree round's own words. The chain's costs and what-if are not drawn (the race
    measures chain rounds); the prefill has no tree yet: the chain's words, no figure."""
    name = "tree"

    def scales(self, run):
        """One scale for every node's memory panel over the run."""
        return {"nodes": figures.clipped_scale([g for rec in run.records if rec.get("memory")
                                                for g in rec["memory"]["tree"]])}

    def views(self, run, step, look, scales):
        r, phase = steps.where(run, step)
        rec, lang = run.records[r], look.lang
        not_drawn = {"lower_left": nothing("run"), "lower_right": nothing("run"), "bottom": nothing("run"),
                     "bottom_caption": nothing("run", "")}
        if rec.get("kind") != "tree_round":
            return {**chain_words(run, step, lang), **{slot: nothing("phase") for slot in FIGURES}, **not_drawn}

        def drawn(name, figure):
            return View(name, "phase", lambda: figure(run, rec, phase, look))
        return {
            **chain_words(run, step, lang),
            "text": View("tree_text", "step",
                         lambda: H.text_so_far(run, step, lang, TV.pending_chips(run, rec, phase, lang))),
            "panel": View("tree_panel", "step", lambda: TV.panel_html(run, rec, phase, lang)),
            "explain": View("tree_explanation", "step", lambda: TV.explanation(run, rec, phase, lang)),
            "beside": drawn("tree", TV.tree_figure),
            "upper": View("node_memories", "phase",
                          lambda: TV.node_memories(run, rec, phase, look, scales.get("nodes"))),
            "middle": drawn("conv_windows", TV.window_figure),
            "left": drawn("mask", TV.mask_figure),
            "right": drawn("kv_slots", TV.slots_figure),
            **not_drawn,
        }


CHAIN, TREE, AUTO = ChainMode(), TreeMode(), AutoMode()


def mode_of(run):
    """The mode a run is drawn in: its settings' draft tree, else k="auto", else a chain of k."""
    if run.settings.tree:
        return TREE
    return AUTO if run.settings.auto else CHAIN
