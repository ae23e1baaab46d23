"""The race tab: its components and events. The work is done by demo.race, the drawing by demo.race_html.

    build_race_tab(shared)      # inside `with gr.Tab(...)`; shared: a demo.frame.Shared (sets its prompt, raw, k)

API: `/race` (prompt, max_new_tokens, k, rollback, temperature, seed, raw, thinking, model, lang, rule, tree) streams
(status, plain stats, plain text, speculative stats, speculative text, verdict, third lane's stats,
third lane's text, timeline, summary JSON); only the first two inputs are needed (rule: "shared" noise, the
default, or "rejection" sampling; demo.choices.RULES), and the last output of the
last update is the full summary (demo.race.summary), or {"error": message} when the race could not
run. rollback "both" runs three lanes: plain, speculative with recompute, speculative with select
(the third lane); tree "2+1" (demo.choices.TREES) makes the third lane draft a tree of that shape each
round, beside the chain of k, every lane eager; without either the third lane says it did not run, and
the page hides it. Values of
the wrong type, NaN or out of range are replaced (demo.validate) and the summary's "notices" say so;
an unknown model key is refused with the list of offered ones. When every compute slot is busy, the
status says where the visitor stands in the queue (demo.serving).
"""
import logging

import gradio as gr
from gradio.context import Context

from demo import environment, models, serving
from demo.frame import Components, examples_table, model_error_text, words
from demo.gpu import on_gpu, race_seconds
from demo.i18n import DEFAULT_LANG, LANGS, notice_text, t
from demo.prompts import DEFAULT_EXAMPLE, pick_example, prepare, rollback_choices
from demo.race import race, summary
from demo.race_html import (lane_off_html, plain_text_html, spec_text_html, stats_html, timeline_html, verdict_html,
                            waiting_html)
from demo.theme import FULL_MARKS_JS
from demo.tokens import legend_html
from demo.choices import AUTO, BOTH, LIMITS, PAGE_TEMPERATURE, RACE_ROLLBACKS, RULES, TREES, lane_rollbacks
from demo.validate import InputError, Notice, as_bool, race_settings
from qwen.compiled import Phase

log = logging.getLogger(__name__)
# a race whose lanes reach this much engine time streams live; a shorter one (the embedded model's: 0.2 s)
# shows its lanes once they finish. Every race shorter than demo.race_html.REPLAY_SECONDS is then replayed
# slowed down in the page (demo/static/race-replay.html)
LIVE_AFTER = 2.0
# Run and Enter first bring the lanes into view (the replay bar just above them)
SHOW_LANES_JS = ("(...a) => { const el = document.getElementById('race-replay-row'); "
                 "if (window.__raceReplay) window.__raceReplay.stop(); "
                 "if (el) el.scrollIntoView({behavior: 'smooth', block: 'start'}); return a; }")
REPLAY_JS = "() => { if (window.__raceReplay) window.__raceReplay.start(); }"


def _status(key, lang, notices=(), **params):
    lines = [t(key, lang, **params)] + [f"⚠️ {notice_text(n, lang)}" for n in notices]
    return "\n\n".join(lines)


def _phase_status(phase, chosen, lang, notices):
    """The status line of a phase (chosen: the RaceSettings); with three lanes the racing one names them."""
    if phase == "racing" and chosen.tree:
        return _status("status_racing_tree", lang, notices)
    if phase == "racing" and chosen.rollback == BOTH:
        return _status("status_racing_3", lang, notices)
    return _status(f"status_{phase}", lang, notices)


def rule_choices(lang):
    """Speculative sampling's rules a visitor may choose (demo.choices.RULES)."""
    return [(t(f"rule_{rule}", lang), rule) for rule in RULES]


# The race event's outputs, by name, in the order the /race API documents them: each lane's stats and text (plain,
# speculative, the third), the verdict before the third lane and the summary last. An update names what it sets.
RACE_OUTPUTS = ("status", "plain_stats", "plain_text", "spec_stats", "spec_text", "verdict", "third_stats",
                "third_text", "timeline", "result")
LANES = ("plain", "spec", "third")


def outputs(named):
    """A race update by name -> the event's outputs in RACE_OUTPUTS order, gr.skip() for all it leaves as it was."""
    unknown = set(named) - set(RACE_OUTPUTS)
    if unknown:
        raise KeyError(f"not race outputs: {sorted(unknown)}")
    return tuple(named[name] if name in named else gr.skip() for name in RACE_OUTPUTS)


def _failed(message):
    """Outputs for a race that could not run: the message in the status, the rest left as it was."""
    return outputs({"status": message, "result": {"error": message}})


def _lane_outputs(lane, run, lang, max_seconds):
    """A lane's two outputs by name: its stats and its text (the third lane off: an empty frame)."""
    if lane == "third" and run is None:
        return {"third_stats": stats_html(None), "third_text": lane_off_html(lang)}
    text = plain_text_html(run, lang) if lane == "plain" else spec_text_html(run, lang)
    return {f"{lane}_stats": stats_html(run, lang, max_seconds), f"{lane}_text": text}


def race_stream(store, prompt, max_new_tokens=120, *, k=2, rollback="select", temperature=0.0, seed=0, raw=False,
                thinking=False, model=None, lang=DEFAULT_LANG, progress=None, max_seconds=None, rule="shared",
                tree="", busy=lambda: False):
    """The race event: validate, load, run, and stream the nine outputs. Never raises: every
    problem ends as a message in the status line (and {"error": ...} as the summary)."""
    lang = lang if lang in LANGS else DEFAULT_LANG
    max_seconds = max_seconds or environment.max_seconds()
    try:
        chosen = race_settings(prompt, max_new_tokens, k, rollback, temperature, seed, raw=raw, thinking=thinking,
                               rule=rule, tree=tree)
        loaded = store.get(model or store.default, progress)
        if loaded.mtp is None:
            raise models.ModelError(t("no_mtp", lang, model=loaded.key))
        ids, more = prepare(loaded, chosen, environment.max_prompt_tokens())
        notices = list(chosen.notices) + list(more)
        # the compiler shares the CPU: say the timings suffer
        if chosen.tree and loaded.engine()[0] is not loaded.model:
            notices.append(Notice("tree_eager"))
        elif loaded.compile_status().phase in (Phase.COMPILING, Phase.COMPILING_MORE):
            notices.append(Notice("timing_while_compiling"))
        for n in notices[:3]:
            gr.Warning(notice_text(n, lang))
        sent = {}                       # what a lane showed last (unchanged: not sent again)

        def changed(lane, run, final):
            now = (len(run.tokens), run.ended, run.started) if run is not None else "off"
            if sent.get(lane) == now and not final:
                return False
            sent[lane] = now
            return True

        live = False                    # streamed while racing? (a short race is replayed instead)
        for u in race(loaded, ids, chosen, max_seconds, busy=busy):
            final = u.phase == "done"
            live = live or max(run.seconds for run in [u.plain] + u.lanes) >= LIVE_AFTER
            named = {"status": _phase_status(u.phase, chosen, lang, notices)}
            if u.phase == "racing" and not live:
                yield outputs(named)
                continue
            for lane, run in zip(LANES, (u.plain, u.spec, u.lanes[1] if len(u.lanes) > 1 else None)):
                if changed(lane, run, final):
                    named |= _lane_outputs(lane, run, lang, max_seconds)
            named["verdict"] = verdict_html(u.verdict, u.plain, u.lanes, lang, lane_costs=u.lane_costs,
                                             speedups=u.speedups, skipped=u.skipped)
            if u.phase != "racing":
                named["timeline"] = timeline_html(u.plain, u.lanes, lang, u.lane_costs, race_id=str(id(u.plain)))
            if final:
                named["result"] = summary(loaded.key, u.plain, u.lanes, chosen,
                                          [notice_text(n, "English") for n in notices], lane_costs=u.lane_costs,
                                          speedups=u.speedups, skipped=u.skipped)
            yield outputs(named)
    except InputError as e:
        gr.Warning(notice_text(e, lang))
        yield _failed(notice_text(e, lang))
    except models.ModelError as e:
        message = model_error_text(store, model or store.default, e, lang)
        gr.Warning(message)
        yield _failed(message)
    except Exception as e:        # the engine failed: say so, keep serving
        log.exception("race failed")
        yield _failed(t("status_error", lang, error=f"{type(e).__name__}: {str(e)[:200]}"))


def build_race_tab(shared):
    """The race's components and events, inside the caller's gr.Tab. Sets shared's prompt, raw, k, max_new
    and examples (demo.frame.Shared); returns the components by name (demo.frame.Components)."""
    say = lambda component, **props: words(shared, component, **props)      # noqa: E731 (relabelled with lang)
    ui = _build_race_inputs(shared, say)
    _build_lanes(ui, say)
    shared.prompt, shared.raw, shared.k, shared.examples, shared.max_new = ui.prompt, ui.raw, ui.k, ui.examples, \
        ui.max_new
    _wire_race(shared, ui)
    _wire_race_words(shared, ui)
    return ui


def _build_race_inputs(shared, say):
    """First screen: the prompt (filled in) with Run under it, the examples beside it; settings folded away."""
    L, ui = DEFAULT_LANG, Components()
    described = shared.store.describe(shared.store.default) or {}
    _, prompt0, raw0, max0 = DEFAULT_EXAMPLE
    with gr.Row(equal_height=False, elem_id="race-top"):
        with gr.Column(scale=3, min_width=300):
            ui.prompt = say(gr.Textbox(prompt0, label=t("prompt", L), placeholder=t("prompt_placeholder", L), lines=3,
                                       max_lines=12, elem_id="race-prompt"), label="prompt",
                            placeholder="prompt_placeholder")
            with gr.Row(equal_height=True):
                ui.run = say(gr.Button(t("run", L), variant="primary", elem_id="race-run", elem_classes="run-button",
                                       scale=3), value="run")
                ui.stop = say(gr.Button(t("stop", L), variant="stop", elem_id="race-stop", scale=1, min_width=80),
                              value="stop")
        with gr.Column(scale=2, min_width=300):
            say(gr.Markdown(t("examples_note", L), elem_id="race-examples-note"), value="examples_note")
            ui.examples = examples_table(say, "race-examples")
    with gr.Accordion(t("settings", L), open=False, elem_id="race-settings") as settings_box:
        with gr.Row():
            ui.k = say(gr.Slider(*LIMITS["k"], step=1, label=t("k", L), info=t("k_info", L), elem_id="race-k"),
                       label="k", info="k_info")
            ui.auto = say(gr.Checkbox(False, label=t("auto_k", L), info=t("auto_k_info", L), elem_id="race-auto"),
                          label="auto_k", info="auto_k_info")
            ui.max_new = say(gr.Slider(*LIMITS["max_new_tokens"][:2], value=max0, step=1,
                                       label=t("max_new_tokens", L), elem_id="race-max-new"), label="max_new_tokens")
            ui.temperature = say(gr.Slider(*LIMITS["temperature"][:2], value=PAGE_TEMPERATURE, step=0.05,
                                           label=t("temperature", L), elem_id="race-temperature"), label="temperature")
            ui.seed = say(gr.Number(0, precision=0, minimum=0, label=t("seed", L), elem_id="race-seed"), label="seed")
        with gr.Row():
            ui.rollback = say(gr.Radio(race_rollback_choices(L), value="select", label=t("rollback", L),
                                       elem_id="race-rollback", scale=3), label="rollback",
                              choices=race_rollback_choices)
            ui.rule = say(gr.Radio(rule_choices(L), value="shared", label=t("rule", L), elem_id="race-rule", scale=2),
                          label="rule", choices=rule_choices)
            ui.tree = say(gr.Radio(tree_choices(L), value="", label=t("tree_lane", L), info=t("tree_lane_info", L),
                                   elem_id="race-tree", scale=2), label="tree_lane", info="tree_lane_info",
                          choices=tree_choices)
            with gr.Column(scale=1, min_width=200):
                ui.raw = say(gr.Checkbox(raw0, label=t("raw", L), elem_id="race-raw"), label="raw")
                ui.thinking = say(gr.Checkbox(False, label=t("thinking", L), elem_id="race-thinking",
                                              visible=described.get("supports_thinking", True)), label="thinking")
    say(settings_box, label="settings")
    return ui


def _build_lanes(ui, say):
    """The status, the replay's controls, the timeline, the lanes, the legend, the verdict and the summary."""
    L = DEFAULT_LANG
    ui.status = gr.Markdown(t("status_ready", L), elem_id="race-status", label="status", show_label=False)
    # the lanes: plain, speculative, and a third (speculative with select, or a tree lane) shown only for rollback
    # "both" or a tree; on a phone each takes the whole width (a column is at least min_width wide: the row wraps)
    spec_title0, third_title0 = lane_titles("select", L)
    with gr.Row(equal_height=True, elem_id="race-replay-row"):
        ui.replay_speed = say(gr.Radio(replay_choices(L), value="auto", label=t("replay_speed", L), scale=4,
                                       elem_id="race-replay-speed", container=False), choices=replay_choices)
        ui.replay = say(gr.Button(t("replay_button", L), elem_id="race-replay", scale=1, min_width=120, size="sm"),
                        value="replay_button")
    # the timeline of every main-model pass above the lanes: Run scrolls the replay row to the top, so while the
    # replay plays, the timeline and both lanes share the screen (presenter mode at 1280x720 included)
    ui.timeline = gr.HTML(timeline_html(None, []), elem_id="race-timeline", label="timeline", show_label=False)
    with gr.Row(equal_height=False, elem_id="race-lanes"):
        with gr.Column(min_width=300, elem_id="race-plain-lane"):
            say(gr.Markdown(_lane_title("plain", L), elem_classes="lane-title"),
                value=lambda lang: _lane_title("plain", lang))
            ui.plain_stats = gr.HTML(stats_html(None), elem_id="race-plain-stats", label="plain_stats",
                                     show_label=False)
            ui.plain_text = gr.HTML(waiting_html(L), elem_id="race-plain", label="plain_text", show_label=False)
        with gr.Column(min_width=300, elem_id="race-spec-lane"):
            ui.spec_title = gr.Markdown(spec_title0, elem_classes="lane-title", elem_id="race-spec-title")
            ui.spec_stats = gr.HTML(stats_html(None), elem_id="race-spec-stats", label="speculative_stats",
                                    show_label=False)
            ui.spec_text = gr.HTML(waiting_html(L), elem_id="race-spec", label="speculative_text", show_label=False)
        with gr.Column(min_width=300, visible=False, elem_id="race-third-lane") as ui.third_lane:
            ui.third_title = gr.Markdown(third_title0, elem_classes="lane-title", elem_id="race-third-title")
            ui.third_stats = gr.HTML(stats_html(None), elem_id="race-third-stats", label="third_stats",
                                     show_label=False)
            ui.third_text = gr.HTML(waiting_html(L), elem_id="race-third", label="third_text", show_label=False)
    # the legend (for every lane), and beside it (under it on a phone) the switch to every token's mark
    with gr.Row(equal_height=False):
        with gr.Column(scale=4, min_width=300):
            say(gr.HTML(legend_html(L), elem_id="race-legend", show_label=False), value=legend_html)
        full_marks = say(gr.Checkbox(False, label=t("full_marks", L), info=t("full_marks_info", L),
                                     elem_id="race-marks", scale=0, min_width=240), label="full_marks",
                         info="full_marks_info")
    full_marks.change(None, [full_marks], None, js=FULL_MARKS_JS, queue=False)
    ui.verdict = gr.HTML(verdict_html(None), elem_id="race-verdict", label="verdict", show_label=False)
    with gr.Accordion(t("summary_json", L), open=False) as json_box:
        ui.result = gr.JSON(label="summary", elem_id="race-summary")
    say(json_box, label="summary_json")


def _wire_race(shared, ui):
    """Run (and Enter in the prompt), Stop, an example's click, the replay's buttons."""
    store, lang = shared.store, shared.lang
    # own table, not gr.Examples: a click sets the values only, so the labels stay in the page's language
    ui.examples.click(pick_example, [ui.examples], [ui.prompt, ui.raw, ui.max_new], api_name="race_example",
                      queue=False, show_progress="hidden")

    # the settings after the first two come by name (by_name, below); /race takes them all by position, in order
    @on_gpu(race_seconds)              # ZeroGPU: a GPU for the race's lanes, its seconds asked from its length
    def run_race(prompt, max_new_tokens=120, progress=gr.Progress(track_tqdm=True), *, k=2, rollback="select",
                 temperature=0.0, seed=0, raw=False, thinking=False, model=store.default, lang=DEFAULT_LANG,
                 rule="shared", tree="", auto=False):
        k = AUTO if as_bool(auto) else k                 # the switch, or k="auto" sent as k by an API caller
        yield from race_stream(store, prompt, max_new_tokens, k=k, rollback=rollback, temperature=temperature,
                               seed=seed, raw=raw, thinking=thinking, model=model, lang=lang, progress=progress,
                               rule=rule, tree=tree, busy=others_waiting)

    blocks = shared.blocks or Context.root_block

    def others_waiting():
        """Does anyone wait for a compute slot? Then a race's unseen repeats give way (demo.race.race)."""
        return serving.queue_place(blocks)[1] > 0

    def queued(language, chosen, tree_shape):
        """Runs at once on click (outside the queue): clear the old verdict and summary, show the third lane
        when the race will run it, and say where the visitor stands when every compute slot is taken (or
        that the queue is full). -> {component: update}"""
        busy = serving.queue_message(blocks, language)
        return {ui.status: busy if busy else gr.skip(), ui.verdict: verdict_html(None), ui.result: None,
                ui.third_lane: gr.update(visible=chosen == BOTH or tree_shape in TREES[1:]),
                ui.timeline: timeline_html(None, [])}

    # /race's inputs: the prompt and the number of new tokens by position, then these by name, in this order
    by_name = {"k": ui.k, "rollback": ui.rollback, "temperature": ui.temperature, "seed": ui.seed, "raw": ui.raw,
               "thinking": ui.thinking, "model": shared.model, "lang": lang, "rule": ui.rule, "tree": ui.tree,
               "auto": ui.auto}
    components = [getattr(ui, name) for name in RACE_OUTPUTS]
    ui.events = []
    for trigger, name in ((ui.run.click, "race"), (ui.prompt.submit, "race_on_enter")):
        pre = trigger(queued, [lang, ui.rollback, ui.tree], [ui.status, ui.verdict, ui.result, ui.third_lane,
                                                             ui.timeline],
                      queue=False, api_name=f"{name}_queued", api_visibility="private", js=SHOW_LANES_JS)
        # preprocess=False: the values reach demo.validate as sent, so a string, null or NaN from an API
        # caller gets the same clamp-or-default-with-a-notice as everything else (Gradio's own checks
        # would crash on them with a message the caller never sees)
        ui.events.append(pre.then(run_race, [ui.prompt, ui.max_new], components, inputs_kwargs=by_name,
                                  api_name=name, show_progress="full",
                                  show_progress_on=[ui.status], api_visibility="public" if name == "race" else "private",
                                  preprocess=False, **shared.compute))
    ui.stop.click(lambda language: t("status_stopped", language), [lang], [ui.status], cancels=ui.events, queue=False,
                  api_name="stop_race")
    # the replay runs in the page alone (no server call): ↻ plays the last race again, a new speed restarts it
    ui.replay.click(None, js=REPLAY_JS)
    ui.replay_speed.change(None, js=REPLAY_JS)


def _wire_race_words(shared, ui):
    """What follows the model and the language: the thinking switch, idle messages, the lanes' titles."""
    store, lang = shared.store, shared.lang

    def model_controls(key):
        described = store.describe(key)
        return gr.update(visible=described is None or described["supports_thinking"])

    shared.model.change(model_controls, [shared.model], [ui.thinking], api_name="race_model_controls", queue=False)

    def relabel(language, status_now, plain_now, spec_now, third_now):
        """What the words map cannot say alone: messages that are only swapped while they are the idle ones.
        -> {component: update}"""
        idle = {t("status_ready", other) for other in LANGS}
        waiting = {waiting_html(other) for other in LANGS}
        off = {lane_off_html(other) for other in LANGS}
        return {ui.status: t("status_ready", language) if status_now in idle else gr.skip(),
                ui.plain_text: waiting_html(language) if plain_now in waiting else gr.skip(),
                ui.spec_text: waiting_html(language) if spec_now in waiting else gr.skip(),
                ui.third_text: waiting_html(language) if third_now in waiting else
                lane_off_html(language) if third_now in off else gr.skip()}

    lang.change(relabel, [lang, ui.status, ui.plain_text, ui.spec_text, ui.third_text],
                [ui.status, ui.plain_text, ui.spec_text, ui.third_text], api_name="race_language", queue=False)

    def lanes_for(chosen, tree_shape, language):
        """The speculative lanes' titles name their rollback (or the tree); the third lane shows only for
        "both" or a tree."""
        spec_now, third_now = lane_titles(chosen, language, tree_shape)
        return {ui.spec_title: spec_now, ui.third_title: third_now,
                ui.third_lane: gr.update(visible=chosen == BOTH or tree_shape in TREES[1:])}

    for trigger in (ui.rollback.change, ui.tree.change, lang.change):
        trigger(lanes_for, [ui.rollback, ui.tree, lang], [ui.spec_title, ui.third_title, ui.third_lane],
                api_visibility="private", queue=False, show_progress="hidden")


def _lane_title(lane, lang):
    sub = t("plain_sub", lang) if lane == "plain" else t("spec_sub", lang)
    return f"### {t(lane, lang)}\n{sub}"


def lane_titles(rollback, lang, tree=""):
    """(second lane's title, third lane's title) for the race's rollback and tree choices. Beside one
    speculative lane, its title names the rollback and says how a round works; with three lanes (narrower)
    each says only what its rollback does to the DeltaNet memory after a rejected draft, or, for a tree
    lane, how a tree round works (a tree lane takes the place of "both")."""
    rollback = rollback if rollback in RACE_ROLLBACKS else "select"

    def compact(rb):
        return f"### {t('spec_short', lang, rollback=rb)}\n{t(f'spec_sub_{rb}', lang)}"
    if tree in TREES[1:]:
        rb = "select" if rollback == BOTH else rollback
        return compact(rb), f"### {t('spec_tree', lang, tree=tree)}\n{t('spec_sub_tree', lang)}"
    if rollback == BOTH:
        return tuple(compact(rb) for rb in lane_rollbacks(BOTH))
    return f"### {t('spec_with', lang, rollback=rollback)}\n{t('spec_sub', lang)}", compact("select")


def replay_choices(lang):
    """The replay's slow motions: auto (demo.race_html.auto_slowdown), or a fixed one."""
    return [(t("replay_auto", lang), "auto"), ("1×", "1"), ("10×", "10"), ("50×", "50")]


def tree_choices(lang):
    """The tree lane's shapes (demo.choices.TREES), "" = off."""
    return [(t("tree_off", lang) if not shape else shape, shape) for shape in TREES]


def race_rollback_choices(lang):
    """The race's: the engine's rollbacks, and both of them as two speculative lanes."""
    return rollback_choices(lang) + [(t("rollback_both", lang), BOTH)]
