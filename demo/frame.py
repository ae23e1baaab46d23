"""The page's frame: header, language switch, presenter mode, model menu, deep links.

    shared = build_header(store)      # inside gr.Blocks: a Shared, what the tabs share
    ... tabs: build_race_tab(shared), build_stepper_tab(shared) ...
    wire_header(demo, shared)         # after the tabs: events of the frame

demo.page.build_app puts the frame and the tabs together.
"""
import os
from dataclasses import dataclass, field

import gradio as gr

from demo import environment, i18n, models, validate
from demo.i18n import t
from demo.prompts import EXAMPLES, default_example, default_prompt_for, example_samples
from demo.theme import LANG_JS, PRESENTER_JS
from qwen.compiled import Phase, Why
from qwen.weights import ModelNotFound


class Components:
    """A tab's components by name, set as the tab builds them (ui.prompt, ui.run, ...): what its events wire."""


@dataclass
class Shared:
    """The components and services every tab may read or listen to. build_header makes it; the race tab
    fills in its controls (prompt, raw, k, max_new, examples), which the stepper carries over; the page
    (demo.page.build_app) fills in blocks and tabs. A tab built alone (tests) leaves those None."""
    store: models.ModelStore
    model: gr.components.Component              # the model menu (a Dropdown: value = a ModelStore key)
    lang: gr.components.Component               # Radio "English" / "中文"
    presenter: gr.components.Component          # Checkbox: presenter mode
    compute: dict = field(default_factory=dict)     # keyword arguments of an event in the one compute queue
    model_status: gr.components.Component = None    # the line about the model in use (Markdown)
    title: gr.components.Component = None           # the header (Markdown), relabelled with the language
    current_model: gr.components.Component = None   # gr.State: the last model that loaded (kept on failure)
    words: dict = field(default_factory=dict)       # component -> its words, relabelled with the language (words())
    prompt: gr.components.Component = None      # the race's controls (build_race_tab)
    raw: gr.components.Component = None
    k: gr.components.Component = None
    max_new: gr.components.Component = None
    examples: gr.components.Component = None
    blocks: gr.Blocks = None                    # the page (demo.page.build_app)
    tabs: gr.Tabs = None
    stepper_tab_id: str = "stepper"             # the id of the stepper's tab in `tabs` (?view=step selects it)


def model_status(loaded, lang=i18n.DEFAULT_LANG):
    """One line about the model in use: its host plan ("CPU · float32 · streamed graphs · 1 thread"), context,
    and how compiling stands."""
    if loaded is None:
        return ""
    plan = plan_text(loaded.plan, lang) if loaded.plan is not None else str(loaded.dtype).replace("torch.", "")
    plan = ("ZeroGPU · " + plan) if environment.zero_gpu() else plan
    return t("model_ready", lang, model=model_label(loaded.key, lang), plan=plan, context=loaded.context,
             mtp="" if loaded.mtp is not None else t("model_no_mtp", lang)) + compile_note(loaded, lang)


def plan_text(plan, lang=i18n.DEFAULT_LANG):
    """A qwen.compiled.HostPlan in the page's language: "CPU · float32 · streamed graphs · 2 threads"."""
    how = t(f"plan_{plan.strategy.name}" if plan.strategy is not None else "plan_eager", lang)
    threads = t("plan_threads" if plan.threads == 1 else "plan_threads_many", lang, n=plan.threads)
    device = "CPU" if plan.device == "cpu" else plan.device
    return f"{device} · {str(plan.dtype).replace('torch.', '')} · {how} · {threads}"


def compile_note(loaded, lang):
    """" · compiling…", " · compiled", " · compiled (… still compiling)", " · eager (reason)" or "" when
    compiling was not asked for."""
    status = loaded.compile_status()
    if status.why is Why.NOT_ASKED:
        return ""
    if status.phase is Phase.EAGER:
        why = t(f"why_{status.why.name}", lang) + (f" ({status.detail})" if status.detail else "")
        return t("model_eager", lang, reason=why)
    return t({Phase.COMPILED: "model_compiled", Phase.COMPILING_MORE: "model_compiled_more"}.get(
        status.phase, "model_compiling"), lang)


def compile_settled(loaded):
    """Whether the compile status can still change (so the page stops asking)."""
    return loaded is None or loaded.compile_status().phase not in (Phase.COMPILING, Phase.LAZY, Phase.COMPILING_MORE)


def model_error_text(store, key, error, lang, current=None):
    """A failed model load in plain words (no exception text, no markup). A hub model that could not be
    fetched gets one sentence about the hub; other failures name the model and the problem's first line."""
    current = current or models.EMBEDDED_KEY
    source = store.sources.get(key, "")
    chain, cause = [], error
    while cause is not None and len(chain) < 8:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    if source and not os.path.isdir(source) and any(isinstance(c, ModelNotFound) for c in chain):
        return t("hub_unreachable", lang, model=key, current=model_label(current, lang))
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    detail = detail if len(detail) <= 300 else detail[:300] + "…"
    return t("model_failed", lang, error=detail.rstrip(". "), model=model_label(current, lang))


def model_label(key, lang):
    """What the model menu shows for a model key (the embedded model's key reads in the page's language)."""
    return t("embedded_model", lang) if key == models.EMBEDDED_KEY else key


def model_choices(store, lang):
    return [(model_label(key, lang), key) for key in store.choices]


def select_model(store, key, current, lang, progress=None):
    """Load the chosen model. -> (dropdown value, last good model, status line). On failure the
    previous model stays selected and usable, and the status line says what went wrong."""
    try:
        loaded = store.get(key, progress)
    except models.ModelError as e:
        message = model_error_text(store, key, e, lang, current)
        gr.Warning(message)
        return current, current, message
    return key, key, model_status(loaded, lang)


def build_header(store):
    """The header row and model menu. -> Shared. The model line is filled in when a page opens
    (wire_header): a model that loads after the page is built (demo.page.serve) shows there too."""
    lang0 = i18n.DEFAULT_LANG
    with gr.Row(equal_height=True):
        with gr.Column(scale=5):
            title = gr.Markdown(_title(lang0), elem_classes="app-header")
        with gr.Column(scale=2, min_width=260):
            lang = gr.Radio(list(i18n.LANGS), value=lang0, label=t("language", lang0), elem_id="lang")
            presenter = gr.Checkbox(False, label=t("presenter", lang0), info=t("presenter_info", lang0),
                                    elem_id="presenter")
    with gr.Row(equal_height=True):
        model = gr.Dropdown(model_choices(store, lang0), value=store.default, label=t("model", lang0),
                            info=t("model_info", lang0), elem_id="model", scale=2, min_width=320)
        status = gr.Markdown(model_status(store.peek(store.default), lang0), elem_id="model-status")
    return Shared(store=store, model=model, lang=lang, presenter=presenter, model_status=status, title=title,
                  current_model=gr.State(store.default),
                  compute={"concurrency_id": "compute", "concurrency_limit": environment.concurrency()})


def _title(lang):
    return f"# {t('title', lang)}\n{t('subtitle', lang)}"


def words(shared, component, **props):
    """Relabel `component` whenever the language changes: each prop (label, info, value, placeholder,
    choices, headers, samples, ...) names an i18n key, or is a function lang -> value. -> component

        words(shared, gr.Button(t("run", L)), value="run")
        words(shared, gr.Radio(...), label="rollback", choices=lambda lang: rollback_choices(lang))
    """
    shared.words[component] = props
    return component


def relabelled(props, lang):
    """The gr.update that puts one registered component's words into `lang`."""
    return gr.update(**{prop: key(lang) if callable(key) else t(key, lang) for prop, key in props.items()})


def wire_header(demo, shared, tabs=None):
    """Events of the frame: model choice, language, presenter mode, deep links (?prompt=&raw=&lang=&presenter=).
    tabs: {i18n key of the tab's label: gr.Tab}. Every component registered with words() (by the frame
    or a tab) is relabelled by one event when the language changes; the race's prompt, while it is a
    language's untouched default, becomes the new language's (demo.prompts.default_prompt_for)."""
    tabs = tabs or {}
    store, model, lang, presenter = shared.store, shared.model, shared.lang, shared.presenter
    status, current = shared.model_status, shared.current_model

    timer = gr.Timer(3, active=False)

    def on_open(request: gr.Request):
        """A page opens: the default model (which may have loaded, or been replaced by the embedded one,
        since the page was built), its line in the link's language, and the compile poll while it compiles."""
        language = validate.deep_link(dict(request.query_params) if request else {}).get("lang", i18n.DEFAULT_LANG)
        loaded = store.peek(store.default)
        return {model: store.default, current: store.default, status: model_status(loaded, language),
                timer: gr.Timer(active=not compile_settled(loaded))}

    demo.load(on_open, None, [model, current, status, timer], api_name="frame_open", api_visibility="private",
              queue=False, show_progress="hidden")

    def on_model(key, last_good, language, progress=gr.Progress(track_tqdm=True)):
        chosen, good, line = select_model(store, key, last_good, language, progress)
        return {model: chosen, current: good, status: line,
                timer: gr.Timer(active=not compile_settled(store.peek(good)))}

    model.input(on_model, [model, current, lang], [model, current, status, timer], api_name="load_model",
                concurrency_id="load", concurrency_limit=1, show_progress="full", show_progress_on=[status])

    words(shared, shared.title, value=_title)
    words(shared, lang, label="language")
    words(shared, presenter, label="presenter", info="presenter_info")
    words(shared, model, label="model", info="model_info", choices=lambda language: model_choices(store, language))
    for name, tab in tabs.items():
        words(shared, tab, label=name)
    registered = shared.words

    def relabel(language):
        return tuple(relabelled(props, language) for props in registered.values())

    lang.change(relabel, [lang], list(registered), api_name="frame_language", queue=False)
    lang.change(None, [lang], None, js=LANG_JS, queue=False)      # <html lang>; the Chinese page hides Gradio's footer
    lang.change(lambda language, key: model_status(store.peek(key), language), [lang, model], [status],
                api_name="frame_model_status", queue=False)

    def poll_compiling(language, key):            # "compiling…" turns into "compiled" without a reload
        loaded = store.peek(key)
        return model_status(loaded, language), gr.Timer(active=not compile_settled(loaded))
    timer.tick(poll_compiling, [lang, model], [status, timer], api_visibility="private", queue=False,
               show_progress="hidden")
    presenter.change(None, [presenter], None, js=PRESENTER_JS, api_name="presenter_mode", queue=False)

    linked = {"prompt": shared.prompt, "raw": shared.raw, "lang": lang, "presenter": presenter}   # link name -> its box

    def on_load(request: gr.Request):
        """A link's values; a link with a language but no prompt opens with that language's default prompt.
        -> {component: value}"""
        values = validate.deep_link(dict(request.query_params) if request else {})
        if "lang" in values and "prompt" not in values:
            values["prompt"] = default_example(values["lang"])[1]
        return {linked[name]: value for name, value in values.items() if name in linked} or gr.skip()

    if shared.prompt is not None and shared.raw is not None:
        demo.load(on_load, None, list(linked.values()), api_name="deep_link", queue=False)
        # a visitor's switch (not a link's: on_load has chosen its prompt)
        lang.input(lambda language, prompt: default_prompt_for(prompt, language), [lang, shared.prompt],
                   [shared.prompt], api_name="frame_default_prompt", api_visibility="private", queue=False)


def examples_table(say, elem_id):
    """The examples as a table in the page's language (both tabs: a click sets the prompt, not the labels)."""
    L = i18n.DEFAULT_LANG
    return say(gr.Dataset(components=["textbox", "textbox"], samples=example_samples(L),
                          headers=[t("kind", L), t("prompt", L)], label=t("examples", L), type="index",
                          samples_per_page=len(EXAMPLES), elem_id=elem_id),
               label="examples", headers=lambda lang: [t("kind", lang), t("prompt", lang)], samples=example_samples)
