"""The "Step through it" tab: one speculative round at a time — guess, verify, accept or roll back.

    with gr.Tab("Step through"):
        build_stepper_tab(shared)       # shared: a demo.frame.Shared (store, model, lang, presenter, ...)

Start records a whole run with the real engine (demo.stepper.recording.record_run); Next / Back / Play / Reset
then walk the recorded trace with no compute. The position lives in the visitor's gr.State (a Session),
never in a global. A step sends only what changed (render_changes): the run-wide figures once, a round's figures
once per phase. Keys: → / PageDown next, ← / PageUp back, space play/pause (ignored while typing);
presses made during a step wait their turn in the browser. The keys (demo/static/stepper-keys.html) and
the view's styles (demo/static/stepper.css) come with the page's launch options (demo.theme.launch_options()).
Every event has an api_name: step_start, step_next, step_prev, step_reset, step_play, step_tick,
step_speed, step_skip_restore, trace_export, trace_import (which also sets the controls to the trace's
settings), step_language, step_presenter, step_example, step_{prompt,raw,k}_from_race, step_deep_link.
"""
import itertools
import logging
from dataclasses import dataclass, field, replace

import gradio as gr
from gradio.context import Context
from plotly.basedatatypes import BaseFigure

from demo import choices, models, serving
from demo.stepper import figures, modes, recording, steps, traceio
from demo.stepper import panels as H
from demo.stepper.drawn import box_value, figure_html
from demo.stepper.figures import Look
from demo.frame import Components, examples_table, model_error_text, model_label, words
from demo.gpu import generation_seconds, on_gpu
from demo.i18n import DEFAULT_LANG, LANGS, notice_text, t
from demo.prompts import pick_example, prepare, rollback_choices
from demo.race import engine_for
from demo.tokens import legend_html
from demo.environment import max_prompt_tokens, max_seconds, session_ttl
from demo.theme import static_text
from demo.choices import ROLLBACKS, TREES
from demo.validate import InputError, as_bool, choose, clamp_all, clamp_number, clean_prompt, deep_link
from qwen.tree import parse_tree

log = logging.getLogger(__name__)

# every event that draws figures passes what the browser knows as its last input: "dark" (plotly needs
# a template) and "narrow" (a phone: heatmaps one to a row); see figures.Look.from_client
LOOK_JS = static_text("look.js")

# the race's limits, but a recorded run is kept whole: at most steps.MAX_NEW_TOKENS new tokens, 48 unless asked
LIMITS = {**choices.LIMITS, "max_new_tokens": (1, steps.MAX_NEW_TOKENS, 48)}


@dataclass(frozen=True)
class Session:
    """One visitor's walk through one recorded (or uploaded) run, kept in their gr.State (None before the
    first run). Events never change it in place: each returns a new one (dataclasses.replace)."""
    run: steps.Run
    step: int = 0                   # where the walk is: steps.where(run, step) -> (round, phase)
    proof: recording.Proof = None   # the skip-the-restore proof, once asked for
    id: int = 0                     # the run's number in this process: what was drawn for another run never counts
    shown: dict = field(default_factory=dict)   # view output -> the key of what the browser shows (render_changes)
    scales: dict = None             # the run's colour scales (run_scales: its mode's), computed once


# The stepper's controls by name: each is the steps.Settings field it sets and the tab's component (ui.<name>).
# This one tuple drives Start's inputs (read_settings), the deep link (apply_deep_link) and what a loaded trace
# sets (controls_of); step_start's API takes them in this order.
CONTROLS = ("prompt", "k", "rollback", "max_new_tokens", "temperature", "seed", "watch_layer", "watch_head", "raw",
            "tree", "auto")
NUMBERS = ("k", "max_new_tokens", "temperature", "seed", "watch_layer", "watch_head")    # clamped to LIMITS


# --- plain functions behind the events ---------------------------------------------------------------------

def read_settings(prompt, *, k, rollback, max_new_tokens, temperature, seed, watch_layer, watch_head, raw, tree="",
                  auto=False):
    """Visitor input, by control name (CONTROLS) -> (steps.Settings, [Notice]); raises InputError for an empty
    prompt. A tree (one of demo.choices.TREES) sets k to its depth; auto (k="auto", chains only) sets k to
    AUTO_MAX_K, the longest draft."""
    text, notices = clean_prompt(prompt)
    values, more = clamp_all({"k": k, "max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed,
                              "watch_layer": watch_layer, "watch_head": watch_head}, LIMITS)
    notices += more
    rollback, more = choose(rollback, ROLLBACKS, "select", "rollback")
    notices += more
    tree, more = choose("" if tree is None else str(tree).strip(), TREES, "", "tree")
    auto = as_bool(auto) and not tree
    if tree:
        values["k"] = parse_tree(tree).depth
    elif auto:
        values["k"] = choices.AUTO_MAX_K
    return steps.Settings(prompt=text, rollback=rollback, raw=as_bool(raw), tree=tree, auto=auto, **values), \
        notices + more


def encode(loaded, settings):
    """The prompt's ids for this model (chat template unless raw), cut to fit, as the race's (demo.prompts.prepare;
    settings.max_new_tokens may shrink). -> (ids, notices)"""
    return prepare(loaded, settings, max_prompt_tokens())


VIEW = modes.SLOTS         # the view's outputs, by slot name (demo.stepper.modes), in the order every redraw sends them
# where the page draws each figure slot: the boxes' element ids keep the names of what a chain draws there, as the
# browser tests know them
FIGURE_BOXES = {"beside": "stepper-layers", "upper": "stepper-memory", "middle": "stepper-conv",
                "left": "stepper-change", "right": "stepper-kv", "lower_left": "stepper-cost",
                "lower_right": "stepper-acceptance", "bottom": "stepper-whatif"}


def _parts(session, look):
    """Per slot of the view: (what decides it, a function drawing it), as the run's mode says (modes.mode_of). A
    slot whose deciding key has not changed since it was last sent need not be sent again (render_changes)."""
    run, mode = session.run, modes.mode_of(session.run)
    r, phase = steps.where(run, session.step)
    run_key = (session.id, look)
    keys = {"step": None, "phase": (run_key, r, phase), "round": (run_key, r), "run": run_key}
    views = mode.views(run, session.step, look, session.scales or mode.scales(run))
    return {slot: (keys[view.changes], view.draw) for slot, view in views.items()}


def run_scales(run):
    """The colour scales of a run's figures, computed once: its mode's (a chain's: figures.run_scales; a tree
    run's: one scale for every node's memory panel)."""
    return modes.mode_of(run).scales(run)


def _sent(value):
    """An output as the page takes it: a figure as HTML it draws itself (drawn.figure_html), the rest as is."""
    return figure_html(value) if isinstance(value, BaseFigure) else value


def _figure_box(elem_id, visible=True):
    """Where the page draws one of the view's figures (static/step-figures.html)."""
    return gr.HTML(box_value(), elem_id=elem_id, elem_classes="step-figure", visible=visible, js_on_load=None)


def _empty_view(lang):
    """The view before a run: hidden (stepper.css), the status line alone says to press Start."""
    words = {"heading": H.phase_heading(None, 0, lang), "text": H.text_so_far(None, 0, lang), "panel": "",
             "explain": "", "bottom_caption": ""}
    return tuple(words.get(name) for name in VIEW)           # the figures: None


def render(session, lang, dark=False, presenter=False, narrow=False):
    """Everything the view shows for the session's run at its current step (a tuple, in VIEW order:
    dict(zip(VIEW, render(...))) names them)."""
    if session is None:
        return _empty_view(lang)
    parts = _parts(session, Look(lang=lang, dark=bool(dark), presenter=bool(presenter), narrow=bool(narrow)))
    return tuple(_sent(parts[name][1]()) for name in VIEW)


def render_changes(session, look):
    """Like render, but outputs the browser already shows come back as gr.skip() (a step then sends
    two or three small figures instead of seven). -> (session recording what is shown, outputs)"""
    if session is None:
        return session, _empty_view(look.lang)
    session = replace(session, scales=session.scales or run_scales(session.run))
    shown, parts, out = dict(session.shown), _parts(session, look), []
    for name in VIEW:
        key, draw = parts[name]
        if key is not None and shown.get(name) == key:
            out.append(gr.skip())
        else:
            out.append(_sent(draw()))
            shown[name] = key
    return replace(session, shown=shown), tuple(out)


def new_session(run):
    """A fresh Session for a recorded or loaded run (its own id: nothing of an earlier run is reused)."""
    return Session(run, id=next(_RUN_IDS), scales=run_scales(run))


_RUN_IDS = itertools.count(1)


def controls_of(run):
    """The control values that reproduce a run (set when a trace is loaded), by control name (CONTROLS); a
    rollback the controls do not offer is left as it was (gr.skip())."""
    values = {name: getattr(run.settings, name) for name in CONTROLS}
    if values["rollback"] not in ROLLBACKS:
        values["rollback"] = gr.skip()
    return values


def _seconds(value):
    """Auto-play seconds per step from the speed slider, whatever was sent: 0.3..5, default 1.5."""
    return float(clamp_number(value, 0.3, 5.0, 1.5, "speed", integer=False)[0])


def run_summary(run, lang):
    rounds, tokens = len(run.records) - 1, len(run.output_ids)
    ended = t(f"step_ended_{run.ended}", lang) if run.ended else ""
    key = "replayed" if run.replay else "recorded"
    return t(key, lang, tokens=tokens, rounds=rounds, model=model_label(run.model_name, lang) if run.model_name else "?",
             ended=ended)


def moved(session, how):
    """A new Session with the step moved: "next", "prev" or "reset" (None stays None)."""
    if session is None:
        return session
    step = {"next": steps.next_step, "prev": steps.prev_step}.get(how, lambda _, s: 0)(session.run, session.step)
    return replace(session, step=step)


def apply_deep_link(request):
    """Values a link such as ?view=step&prompt=…&raw=1&k=2&rollback=recompute&max_new=64&temperature=0&layer=1&head=0
    (or &tree=2%2B1, or &k=auto) prefills (a dict; only keys present and valid). "view": "step" asks for this tab to be selected."""
    params = dict(request.query_params) if request is not None and hasattr(request, "query_params") else {}
    out = {key: value for key, value in deep_link(params).items() if key in ("prompt", "raw")}   # as the race's
    names = {"k": "k", "max_new": "max_new_tokens", "max_new_tokens": "max_new_tokens", "temperature": "temperature",
             "seed": "seed", "layer": "watch_layer", "head": "watch_head"}      # the link's name -> the setting's
    if str(params.get("k", "")).strip().lower() == choices.AUTO:       # k=auto: each round chooses its length
        out["auto"], params = True, {key: value for key, value in params.items() if key != "k"}
    out.update(clamp_all({names[key]: value for key, value in params.items() if key in names}, LIMITS)[0])
    if params.get("rollback") in ROLLBACKS:
        out["rollback"] = params["rollback"]
    if params.get("tree") in TREES:
        out["tree"] = params["tree"]
    if str(params.get("view", "")).lower() in ("step", "stepper"):
        out["view"] = "step"
    return out


# --- the tab ------------------------------------------------------------------------------------------------

def build_stepper_tab(shared):
    """The stepper's components and events, inside the caller's gr.Tab. Returns the components by name
    (demo.frame.Components: the controls, the buttons, `view` {slot name (VIEW): component}, session, timer, ...)."""
    say = lambda component, **props: words(shared, component, **props)      # noqa: E731 (relabelled with lang)
    with gr.Column(elem_id="stepper-panel"):
        ui = _build_inputs(shared, say)
        ui.status = gr.Markdown(t("no_run", DEFAULT_LANG), elem_id="stepper-status")
        _build_view(ui, say)
        _build_trace_row(ui, say)
    ui.look = gr.Textbox("", visible=False, label="look")      # "dark narrow": set in the browser on each event
    # a visitor's recorded run is dropped this long after its last change ($QWEN_SESSION_TTL)
    ui.session, ui.playing = gr.State(None, time_to_live=session_ttl()), gr.State(False)
    ui.timer = gr.Timer(1.5, active=False)
    ui.outputs = [ui.view[name] for name in VIEW]             # every event that redraws sends these, in VIEW order
    ui.controls = {name: getattr(ui, name) for name in CONTROLS}      # {control name: component}
    _wire_start(shared, ui)
    _wire_walk(shared, ui)
    _wire_proof_and_traces(shared, ui)
    _wire_inputs(shared, ui)
    return ui


def _build_inputs(shared, say):
    """The prompt, Start, the examples and the settings. -> demo.frame.Components of them"""
    L, race_prompt, race_raw, race_k = DEFAULT_LANG, shared.prompt, shared.raw, shared.k
    ui = Components()
    say(gr.Markdown(t("summary", L), elem_id="stepper-summary"), value="summary")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3, min_width=300):
            ui.prompt = say(gr.Textbox(race_prompt.value if race_prompt else "", label=t("prompt", L), lines=2,
                                       max_lines=8, elem_id="stepper-prompt"), label="prompt")
            ui.start = say(gr.Button(t("start", L), variant="primary", elem_id="stepper-start",
                                     elem_classes="run-button"), value="start")
        with gr.Column(scale=2, min_width=300):
            ui.examples = examples_table(say, "stepper-examples")
    with gr.Accordion(t("settings", L), open=False, elem_id="stepper-settings") as settings_box:
        with gr.Row():
            ui.k = say(gr.Slider(*LIMITS["k"][:2], value=race_k.value if race_k else LIMITS["k"][2], step=1,
                                 label=t("k", L), elem_id="stepper-k"), label="k")
            ui.rollback = say(gr.Radio(rollback_choices(L), value="select", label=t("step_rollback", L),
                                       elem_id="stepper-rollback"), label="step_rollback", choices=rollback_choices)
            ui.max_new_tokens = say(gr.Slider(*LIMITS["max_new_tokens"], step=1, label=t("max_new", L),
                                       elem_id="stepper-max-new"), label="max_new")
            ui.temperature = say(gr.Slider(*LIMITS["temperature"], step=0.05, label=t("temperature", L),
                                           elem_id="stepper-temperature"), label="temperature")
        with gr.Row():
            ui.watch_layer = say(gr.Number(-1, precision=0, minimum=-1, maximum=255, label=t("watch_layer", L),
                                     elem_id="stepper-layer"), label="watch_layer")
            ui.watch_head = say(gr.Number(-1, precision=0, minimum=-1, maximum=255, label=t("watch_head", L),
                                    elem_id="stepper-head"), label="watch_head")
            ui.seed = say(gr.Number(0, precision=0, minimum=0, label=t("step_seed", L), elem_id="stepper-seed"),
                          label="step_seed")
            ui.raw = say(gr.Checkbox(race_raw.value if race_raw else True, label=t("raw", L), elem_id="stepper-raw"),
                         label="raw")
        with gr.Row():
            ui.tree = say(gr.Radio(step_tree_choices(L), value="", label=t("step_tree", L),
                                   info=t("step_tree_info", L), elem_id="stepper-tree"),
                          label="step_tree", info="step_tree_info", choices=step_tree_choices)
            ui.auto = say(gr.Checkbox(False, label=t("auto_k", L), info=t("step_auto_info", L), elem_id="stepper-auto"),
                          label="auto_k", info="step_auto_info")
    say(settings_box, label="settings")
    return ui


def _build_view(ui, say):
    """The walk through a run: hidden until one is recorded or loaded (stepper.css, by the heading's phase),
    its controls docked at the top of the window, the phase and its explanation right under them; ui.view
    holds each of VIEW's outputs by name."""
    L, view = DEFAULT_LANG, {}
    with gr.Column(elem_id="stepper-view"):
        with gr.Row(equal_height=True, elem_id="stepper-controls"):
            ui.prev = say(gr.Button(t("prev", L), elem_id="stepper-prev"), value="prev")
            ui.next = say(gr.Button(t("next", L), variant="primary", elem_id="stepper-next"), value="next")
            ui.play = gr.Button(t("play", L), elem_id="stepper-play")
            ui.reset = say(gr.Button(t("reset", L), elem_id="stepper-reset"), value="reset")
        view["heading"] = gr.HTML(H.phase_heading(None, 0, L), elem_id="stepper-phase")
        view["explain"] = gr.Markdown("", elem_id="stepper-explain")
        with gr.Row(equal_height=False):
            with gr.Column(scale=2, elem_id="stepper-left"):
                view["text"] = gr.HTML(H.text_so_far(None, 0, L), elem_id="stepper-text")
                say(gr.HTML(legend_html(L), elem_id="stepper-legend"), value=legend_html)
                view["panel"] = gr.HTML("", elem_id="stepper-table")
                with gr.Row(elem_id="stepper-pace"):
                    say(gr.Markdown(t("keys", L), elem_id="stepper-keys-help"), value="keys")
                    ui.speed = say(gr.Slider(0.3, 5, value=1.5, step=0.1, label=t("step_speed", L),
                                             elem_id="stepper-speed"), label="step_speed")
            with gr.Column(scale=3):
                view["beside"] = _figure_box(FIGURE_BOXES["beside"])
        for slot in ("upper", "middle"):
            view[slot] = _figure_box(FIGURE_BOXES[slot])
        for pair in (("left", "right"), ("lower_left", "lower_right")):
            with gr.Row(equal_height=False, elem_classes="step-fig-pair"):
                for slot in pair:
                    view[slot] = _figure_box(FIGURE_BOXES[slot])
        view["bottom"] = _figure_box(FIGURE_BOXES["bottom"])
        view["bottom_caption"] = gr.Markdown("", elem_id="stepper-whatif-caption")
        with gr.Accordion(t("skip_restore", L), open=False) as proof_box:
            ui.skip = say(gr.Checkbox(False, label=t("skip_restore", L), elem_id="stepper-skip-restore"),
                          label="skip_restore")
            ui.proof_html = gr.HTML("", elem_id="stepper-proof")
            ui.drift_fig = _figure_box("stepper-drift", visible=False)
        say(proof_box, label="skip_restore")
    ui.view = view


def _build_trace_row(ui, say):
    """Export a trace file; import one (an UploadButton, not a drop zone: its words follow the page's language)."""
    L = DEFAULT_LANG
    with gr.Row(equal_height=False):
        ui.export = say(gr.Button(t("export", L), elem_id="stepper-export"), value="export")
        ui.export_file = say(gr.File(label=t("trace_file", L), interactive=False, elem_id="stepper-export-file"),
                             label="trace_file")
        ui.upload = say(gr.UploadButton(t("import", L, mb=traceio.MAX_BYTES // 2**20), file_types=[".json"],
                                        type="filepath", elem_id="stepper-import"),
                        label=lambda lang: t("import", lang, mb=traceio.MAX_BYTES // 2**20))


VIEW_QUEUE = dict(concurrency_limit=4, concurrency_id="stepper_view")     # the events that only draw or read a run
NAV = dict(show_progress="hidden", js=LOOK_JS, **VIEW_QUEUE)


def _wire_start(shared, ui):
    """Start: record a run (queued like a race lane), then draw its first step."""
    store, view = shared.store, ui.outputs

    def failed(message):
        return {ui.status: message, ui.playing: False, ui.timer: gr.Timer(active=False)}

    # ZeroGPU: a GPU while recording (one traced run, then the race's cost measurement: about three runs)
    @on_gpu(lambda *args, max_new_tokens=48, **kw: generation_seconds(max_new_tokens, lanes=3))
    def on_start(model_key, progress=gr.Progress(), *, language, presenter_on, client, **controls):
        """Record a run. controls: the values of CONTROLS by name (read_settings). -> {component: update}"""
        try:
            settings, notices = read_settings(**controls)
            loaded = store.get(model_key or store.default)
            if loaded.mtp is None:
                raise models.ModelError(t("model_no_mtp", language).strip(", "))
            ids, more = encode(loaded, settings)
            told = lambda done, total: progress(done / max(total, 1), desc=t("recording", language))  # noqa: E731
            run = recording.record_run(*engine_for(loaded, settings), loaded.chat, ids, settings, loaded.key,
                                       max_seconds=max_seconds(), progress=told, context=loaded.context)
        except InputError as e:
            return failed(t("error", language, error=notice_text(e, language)))
        except models.ModelError as e:
            return failed(t("error", language, error=model_error_text(store, model_key, e, language)))
        except Exception as e:      # the engine failed: say so, keep serving
            log.exception("stepper run failed")
            return failed(t("error", language, error=f"{type(e).__name__}: {str(e)[:200]}"))
        new, out = render_changes(new_session(run), Look.from_client(language, client, presenter_on))
        message = " ".join([run_summary(run, language)] + [notice_text(n, language) for n in notices + more])
        return {ui.session: new, ui.status: message, **dict(zip(view, out)), ui.playing: False,
                ui.timer: gr.Timer(active=False)}

    blocks = shared.blocks or Context.root_block

    def queued(language):
        """Runs at once on click (outside the queue): say where the visitor stands when every compute slot
        is taken, or that the queue is full."""
        return serving.queue_message(blocks, language) or gr.skip()

    ui.start.click(queued, [shared.lang], [ui.status], queue=False, api_name="step_start_queued",
                   api_visibility="private", show_progress="hidden").then(
        on_start, [shared.model], [ui.session, ui.status, *view, ui.playing, ui.timer],
        inputs_kwargs={**ui.controls, "language": shared.lang, "presenter_on": shared.presenter, "client": ui.look},
        api_name="step_start", js=LOOK_JS,
        show_progress="minimal", show_progress_on=[ui.status], preprocess=False,
        **shared.compute)      # values reach read_settings as sent


def _wire_walk(shared, ui):
    """Next / Back / Reset, Play and its timer, the speed slider, the language and presenter switches."""
    lang, presenter, view = shared.lang, shared.presenter, ui.outputs

    def step_event(how):
        """An event that moves the walk (`how`: see moved; None: stays) and redraws what changed."""
        def fn(state, language, presenter_on, client):
            new, out = render_changes(moved(state, how) if how else state,
                                      Look.from_client(language, client, presenter_on))
            return (new, *out)
        return fn

    # presses made while a step is in flight wait in the browser's queue (static/stepper-keys.html), so none is lost
    for button, how in ((ui.next, "next"), (ui.prev, "prev"), (ui.reset, "reset")):
        button.click(step_event(how), [ui.session, lang, presenter, ui.look], [ui.session, *view],
                     api_name=f"step_{how}", **NAV)

    def on_play(is_playing, state, seconds, language):
        on = not is_playing and state is not None and not steps.at_end(state.run, state.step)
        return on, gr.Timer(value=_seconds(seconds), active=on), t("pause" if on else "play", language)

    ui.play.click(on_play, [ui.playing, ui.session, ui.speed, lang], [ui.playing, ui.timer, ui.play],
                  api_name="step_play", show_progress="hidden", queue=False)

    def on_tick(state, language, presenter_on, client):
        new, out = render_changes(moved(state, "next"), Look.from_client(language, client, presenter_on))
        done = new is None or steps.at_end(new.run, new.step)
        stop = (False, gr.Timer(active=False), t("play", language)) if done else (gr.skip(),) * 3
        return (new, *out, *stop)

    ui.timer.tick(on_tick, [ui.session, lang, presenter, ui.look], [ui.session, *view, ui.playing, ui.timer, ui.play],
                  api_name="step_tick", **NAV)
    ui.speed.change(lambda s: gr.Timer(value=_seconds(s)), [ui.speed], [ui.timer], api_name="step_speed",
                    queue=False)

    def relabel(language, state, is_playing, presenter_on, status_now, client):
        new, out = render_changes(state, Look.from_client(language, client, presenter_on))
        idle = {t("no_run", other) for other in LANGS}
        run = state.run if state is not None else None
        status_new = t("no_run", language) if status_now in idle else (run_summary(run, language) if run else gr.skip())
        return {ui.session: new, ui.status: status_new,
                ui.play: gr.update(value=t("pause" if is_playing else "play", language)), **dict(zip(view, out))}

    lang.change(relabel, [lang, ui.session, ui.playing, presenter, ui.status, ui.look],
                [ui.session, ui.status, ui.play, *view], api_name="step_language", **NAV)

    presenter.change(step_event(None), [ui.session, lang, presenter, ui.look], [ui.session, *view],
                     api_name="step_presenter", **NAV)


def _wire_proof_and_traces(shared, ui):
    """The skip-the-restore proof, trace export and trace import."""
    store, view = shared.store, ui.outputs

    @on_gpu(lambda *args, **kw: generation_seconds(recording.PROOF_TOKENS, lanes=2))   # plain and the dirty run
    def on_skip(on, state, model_key, language, presenter_on, client):
        if not on:
            return "", gr.update(visible=False), state
        run = state.run if state is not None else None
        if run is None:
            return t("no_run", language), gr.update(visible=False), state
        try:
            loaded = store.get(model_key or store.default)
            layer_w, head_w = steps.watched(run)         # the run's watched layer and head, also when chosen after it
            settings = steps.Settings(**{**run.settings.__dict__, "temperature": 0.0, "watch_layer": layer_w,
                                         "watch_head": head_w})
            ids, _ = encode(loaded, settings)
            proof = recording.skip_restore_proof(*loaded.engine(), loaded.chat, ids, settings,
                                                   max_seconds=max_seconds())
        except Exception as e:
            log.exception("skip-restore proof failed")
            return t("error", language, error=f"{type(e).__name__}: {str(e)[:200]}"), gr.update(visible=False), state
        look_now = Look.from_client(language, client, presenter_on)
        return (H.proof_html(proof, language, settings.rollback),
                gr.update(value=figure_html(figures.drift(proof.drift, proof.first_diff_round, look_now)),
                          visible=True),
                replace(state, proof=proof))

    ui.skip.input(on_skip, [ui.skip, ui.session, shared.model, shared.lang, shared.presenter, ui.look],
                  [ui.proof_html, ui.drift_fig, ui.session], api_name="step_skip_restore", js=LOOK_JS,
                  show_progress="minimal", **shared.compute)

    def on_export(state, language):
        run = state.run if state is not None else None
        if run is None:
            return None, t("nothing_to_export", language)
        return traceio.write_trace(run), run_summary(run, language)

    ui.export.click(on_export, [ui.session, shared.lang], [ui.export_file, ui.status], api_name="trace_export",
                    **VIEW_QUEUE)

    def on_import(path, language, presenter_on, client):
        """A trace file -> {component: update}: its run drawn, the controls set to its settings (a failure: the
        status alone)."""
        if not path:
            return gr.skip()
        try:
            run = traceio.read_trace(path)
            new, out = render_changes(new_session(run), Look.from_client(language, client, presenter_on))
            controls = {ui.controls[name]: value for name, value in controls_of(run).items()}
            return {ui.session: new, ui.status: run_summary(run, language), **dict(zip(view, out)), **controls}
        except traceio.TraceError as e:
            return {ui.status: t("import_failed", language, error=str(e))}
        except Exception as e:      # a file that passed the checks but cannot be drawn: say so, keep serving
            log.exception("trace import failed")
            return {ui.status: t("import_failed", language, error=f"{type(e).__name__}: {str(e)[:200]}")}

    ui.upload.upload(on_import, [ui.upload, shared.lang, shared.presenter, ui.look],
                     [ui.session, ui.status, *view, *ui.controls.values()], api_name="trace_import", js=LOOK_JS,
                     **VIEW_QUEUE)


def _wire_inputs(shared, ui):
    """Examples, the race's prompt / raw / k carried over, and the deep link."""
    ui.examples.click(pick_example, [ui.examples], [ui.prompt, ui.raw, ui.max_new_tokens], api_name="step_example",
                      queue=False, show_progress="hidden")
    for source, target, name in ((shared.prompt, ui.prompt, "prompt"), (shared.raw, ui.raw, "raw"),
                                 (shared.k, ui.k, "k")):
        if source is not None:
            source.change(lambda value: value, [source], [target], api_name=f"step_{name}_from_race", queue=False,
                          show_progress="hidden")
    _wire_deep_link(shared, ui.controls)


def step_tree_choices(lang):
    """The stepper's drafts: a chain of k (""), or a tree of one of demo.choices.TREES."""
    return [(t("tree_chain", lang) if not shape else shape, shape) for shape in TREES]


def _wire_deep_link(shared, controls):
    """Prefill the controls from the page's query string when it loads; select this tab for ?view=step
    (through shared.tabs when the page provides its gr.Tabs, else by clicking the tab in the browser)."""
    blocks = shared.blocks or Context.root_block
    if blocks is None:
        return
    tabs = shared.tabs
    outputs = list(controls.values()) + ([tabs] if tabs is not None else [])

    def on_load(request: gr.Request):
        values = apply_deep_link(request)
        updates = {component: values[name] for name, component in controls.items() if name in values}
        if tabs is not None and "view" in values:
            updates[tabs] = gr.Tabs(selected=shared.stepper_tab_id)
        return updates or gr.skip()               # {}: a link with nothing for the stepper

    blocks.load(on_load, None, outputs, api_name="step_deep_link", queue=False)
    if tabs is None:
        names = [t("tab_stepper", lang) for lang in ("English", "中文")]
        blocks.load(None, None, None, api_name="step_deep_link_tab", js=(
            "() => { if (new URLSearchParams(location.search).get('view') !== 'step') return;"
            f" const names = {names!r};"
            " const pick = () => { const b = [...document.querySelectorAll('button[role=\"tab\"]')]"
            ".find(x => names.some(n => x.textContent.trim() === n)); if (b) b.click(); return !!b; };"
            " if (!pick()) setTimeout(pick, 500); }"))
