"""The race tab: its components and events. The work is done by demo.race, the drawing by demo.render.

    build_race_tab(shared)      # inside `with gr.Tab(...)`; sets shared["prompt"]

API: `/race` (prompt, max_new_tokens, k, rollback, temperature, seed, raw, thinking, model, lang) streams
(status, plain stats, plain text, speculative stats, speculative text, verdict, summary JSON); only
the first two inputs are needed, and the last output of the last update is the full summary
(demo.race.summary), or {"error": message} when the race could not run. Values of the wrong type,
NaN or out of range are replaced (demo.validate) and the summary's "notices" say so; an unknown model
key is refused with the list of offered ones. When every compute slot is busy, the status says where
the visitor stands in the queue (demo.serving).
"""
import logging

import gradio as gr
from gradio.context import Context

from demo import models, serving
from demo.i18n import DEFAULT_LANG, LANGS, notice_text, t
from demo.race import prepare, race, summary
from demo.render import legend_html, plain_text_html, spec_text_html, stats_html, verdict_html, waiting_html
from demo.validate import InputError, race_settings

log = logging.getLogger(__name__)

EXAMPLES = [    # prompt, raw completion, max new tokens
    ["用一句话介绍一下 Transformer。", False, 120],
    ["写一段 200 字的短文，介绍长江。", False, 200],
    [":mod:`json` --- JSON encoder and decoder\n==========================================\n\n", True, 160],
    ["In the beginning God created the heaven and the earth.", True, 120],
    ["床前明月光，", True, 60],
    ["Explain the :func:`os.path.join` function.", False, 120],
    ["My favourite pizza topping is", True, 80],
]


def _status(key, lang, notices=(), **params):
    lines = [t(key, lang, **params)] + [f"⚠️ {notice_text(n, lang)}" for n in notices]
    return "\n\n".join(lines)


def _failed(message):
    """Outputs for a race that could not run: the message in the status, the rest left as it was."""
    skip = gr.skip()
    return message, skip, skip, skip, skip, skip, {"error": message}


def race_stream(store, prompt, max_new_tokens=120, k=2, rollback="select", temperature=0.0, seed=0, raw=False,
                thinking=False, model=None, lang=DEFAULT_LANG, progress=None, max_seconds=None):
    """The race event: validate, load, run, and stream the seven outputs. Never raises: every
    problem ends as a message in the status line (and {"error": ...} as the summary)."""
    lang = lang if lang in LANGS else DEFAULT_LANG
    max_seconds = max_seconds or models.max_seconds()
    try:
        settings = race_settings(prompt, max_new_tokens, k, rollback, temperature, seed, raw, thinking)
        loaded = store.get(model or store.default, progress)
        if loaded.mtp is None:
            raise models.ModelError(t("no_mtp", lang, model=loaded.key))
        ids, more = prepare(loaded, settings, models.max_prompt_tokens())
        notices = settings.notices + more
        for n in notices[:3]:
            gr.Warning(notice_text(n, lang))
        sent_plain = None                       # what the plain lane showed last (unchanged: not sent again)
        for u in race(loaded, ids, settings, max_seconds):
            final = u.phase == "done"
            plain_now = (len(u.plain.tokens), u.plain.ended)
            same_plain = plain_now == sent_plain and not final
            sent_plain = plain_now
            yield (_status({"plain": "status_plain", "speculative": "status_spec", "done": "status_done"}[u.phase],
                           lang, notices),
                   gr.skip() if same_plain else stats_html(u.plain, lang, max_seconds),
                   gr.skip() if same_plain else plain_text_html(u.plain, lang),
                   stats_html(u.spec, lang, max_seconds), spec_text_html(u.spec, lang),
                   verdict_html(u.verdict, u.plain, u.spec, lang),
                   summary(loaded.key, u.plain, u.spec, settings, [notice_text(n, "English") for n in notices])
                   if final else gr.skip())
    except InputError as e:
        gr.Warning(notice_text(e, lang))
        yield _failed(notice_text(e, lang))
    except models.ModelError as e:
        gr.Warning(str(e))
        yield _failed(str(e))
    except Exception as e:        # the engine failed: say so, keep serving
        log.exception("race failed")
        yield _failed(t("status_error", lang, error=f"{type(e).__name__}: {str(e)[:200]}"))


def build_race_tab(shared):
    """The race's components and events. Sets shared["prompt"]; returns the components by name."""
    store, model, lang = shared["store"], shared["model"], shared["lang"]
    L = DEFAULT_LANG
    described = store.describe(store.default) or {}
    with gr.Row(equal_height=False):
        prompt = gr.Textbox(label=t("prompt", L), placeholder=t("prompt_placeholder", L), lines=3, max_lines=12,
                            elem_id="race-prompt", scale=5)
        with gr.Column(scale=1, min_width=200):
            run = gr.Button(t("run", L), variant="primary", elem_id="race-run", elem_classes="run-button")
            stop = gr.Button(t("stop", L), variant="stop", elem_id="race-stop")
    with gr.Accordion(t("settings", L), open=True, elem_id="race-settings") as settings_box:
        with gr.Row():
            k = gr.Slider(1, 4, value=2, step=1, label=t("k", L), info=t("k_info", L), elem_id="race-k")
            max_new = gr.Slider(1, 512, value=120, step=1, label=t("max_new_tokens", L), elem_id="race-max-new")
            temperature = gr.Slider(0, 2, value=0, step=0.05, label=t("temperature", L), elem_id="race-temperature")
            seed = gr.Number(0, precision=0, minimum=0, label=t("seed", L), elem_id="race-seed")
        with gr.Row():
            rollback = gr.Radio(_rollback_choices(L), value="select", label=t("rollback", L), elem_id="race-rollback",
                                scale=3)
            with gr.Column(scale=1, min_width=200):
                raw = gr.Checkbox(False, label=t("raw", L), elem_id="race-raw")
                thinking = gr.Checkbox(False, label=t("thinking", L), elem_id="race-thinking",
                                       visible=described.get("supports_thinking", True))
    status = gr.Markdown(t("status_ready", L), elem_id="race-status", label="status", show_label=False)
    with gr.Row(equal_height=False):
        with gr.Column():
            plain_title = gr.Markdown(_lane_title("plain", L), elem_classes="lane-title")
            plain_stats = gr.HTML(stats_html(None), elem_id="race-plain-stats", label="plain_stats", show_label=False)
            plain_text = gr.HTML(waiting_html(L), elem_id="race-plain", label="plain_text", show_label=False)
        with gr.Column():
            spec_title = gr.Markdown(_lane_title("spec", L), elem_classes="lane-title")
            spec_stats = gr.HTML(stats_html(None), elem_id="race-spec-stats", label="speculative_stats",
                                 show_label=False)
            spec_text = gr.HTML(waiting_html(L), elem_id="race-spec", label="speculative_text", show_label=False)
            legend = gr.HTML(legend_html(L), elem_id="race-legend", show_label=False)
    verdict = gr.HTML(verdict_html(None), elem_id="race-verdict", label="verdict", show_label=False)
    with gr.Accordion(t("summary_json", L), open=False) as json_box:
        result = gr.JSON(label="summary", elem_id="race-summary")
    examples_note = gr.Markdown(t("examples_note", L))
    gr.Examples(EXAMPLES, [prompt, raw, max_new], cache_examples=False, label="Examples · 示例",
                api_name="race_example")
    shared["prompt"] = prompt

    def run_race(prompt, max_new_tokens=120, k=2, rollback="select", temperature=0.0, seed=0, raw=False,
                 thinking=False, model=store.default, lang=DEFAULT_LANG, progress=gr.Progress(track_tqdm=True)):
        yield from race_stream(store, prompt, max_new_tokens, k, rollback, temperature, seed, raw, thinking, model,
                               lang, progress)

    blocks = shared.get("blocks") or Context.root_block

    def queued(language):
        """Runs at once on click (outside the queue): clear the old verdict and summary, and say where the
        visitor stands when every compute slot is taken (or that the queue is full)."""
        busy = serving.queue_message(blocks, language)
        return busy if busy else gr.skip(), verdict_html(None), None

    inputs = [prompt, max_new, k, rollback, temperature, seed, raw, thinking, model, lang]
    outputs = [status, plain_stats, plain_text, spec_stats, spec_text, verdict, result]
    events = []
    for trigger, name in ((run.click, "race"), (prompt.submit, "race_on_enter")):
        pre = trigger(queued, [lang], [status, verdict, result], queue=False, api_name=f"{name}_queued",
                      api_visibility="private")
        # preprocess=False: the values reach demo.validate as sent, so a string, null or NaN from an API
        # caller gets the same clamp-or-default-with-a-notice as everything else (Gradio's own checks
        # would crash on them with a message the caller never sees)
        events.append(pre.then(run_race, inputs, outputs, api_name=name, show_progress="full",
                               show_progress_on=[status], api_visibility="public" if name == "race" else "private",
                               preprocess=False, **shared["compute"]))
    stop.click(lambda language: t("status_stopped", language), [lang], [status], cancels=events, queue=False,
               api_name="stop_race")

    def model_controls(key):
        described = store.describe(key)
        return gr.update(visible=described is None or described["supports_thinking"])

    model.change(model_controls, [model], [thinking], api_name="race_model_controls", queue=False)

    def relabel(language):
        return (gr.update(label=t("prompt", language), placeholder=t("prompt_placeholder", language)),
                gr.update(value=t("run", language)), gr.update(value=t("stop", language)),
                gr.update(label=t("settings", language)),
                gr.update(label=t("k", language), info=t("k_info", language)),
                gr.update(label=t("max_new_tokens", language)), gr.update(label=t("temperature", language)),
                gr.update(label=t("seed", language)),
                gr.update(label=t("rollback", language), choices=_rollback_choices(language)),
                gr.update(label=t("raw", language)), gr.update(label=t("thinking", language)),
                _lane_title("plain", language), _lane_title("spec", language), legend_html(language),
                gr.update(label=t("summary_json", language)), t("examples_note", language))

    lang.change(relabel, [lang], [prompt, run, stop, settings_box, k, max_new, temperature, seed, rollback, raw,
                                  thinking, plain_title, spec_title, legend, json_box, examples_note],
                api_name="race_language", queue=False)
    return {"prompt": prompt, "run": run, "stop": stop, "status": status, "result": result, "events": events}


def _lane_title(lane, lang):
    sub = t("plain_sub", lang) if lane == "plain" else t("spec_sub", lang)
    return f"### {t(lane, lang)}\n{sub}"


def _rollback_choices(lang):
    return [(t("rollback_select", lang), "select"), (t("rollback_recompute", lang), "recompute")]
