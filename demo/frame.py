"""The page's frame: header, language switch, presenter mode, model menu, deep links.

    shared = build_header(store)      # inside gr.Blocks; returns the dict the tabs share
    ... tabs: build_race_tab(shared), build_stepper_tab(shared) ...
    wire_header(demo, shared)         # after the tabs: events of the frame

`shared` holds the components every tab may read or listen to:
    "model" (Dropdown, value = a ModelStore key), "lang" (Radio "English" / "中文"),
    "presenter" (Checkbox), "prompt" (the race's prompt Textbox, set by build_race_tab),
    "i18n" (the demo.i18n module), "store" (the ModelStore), "model_status" (Markdown),
    "compute" (keyword arguments that put an event in the one shared compute queue),
    and, set by app.py: "tabs" (the gr.Tabs), "blocks" (the gr.Blocks), "stepper_tab_id".
"""
import gradio as gr

from demo import i18n, models, validate
from demo.i18n import t
from demo.theme import PRESENTER_JS


def model_status(loaded, lang=i18n.DEFAULT_LANG):
    """One line about the model in use."""
    if loaded is None:
        return ""
    dtype = str(loaded.dtype).replace("torch.", "")
    return t("model_ready", lang, model=loaded.key, dtype=dtype, context=loaded.context,
             mtp="" if loaded.mtp is not None else t("model_no_mtp", lang))


def select_model(store, key, current, lang, progress=None):
    """Load the chosen model. -> (dropdown value, last good model, status line). On failure the
    previous model stays selected and usable, and the status line says what went wrong."""
    try:
        loaded = store.get(key, progress)
    except models.ModelError as e:
        message = t("model_failed", lang, error=str(e), model=current)
        gr.Warning(message)
        return current, current, message
    return key, key, model_status(loaded, lang)


def build_header(store):
    """The header row and model menu. -> the `shared` dict (see the module docstring)."""
    lang0 = i18n.DEFAULT_LANG
    with gr.Row(equal_height=True):
        with gr.Column(scale=5):
            title = gr.Markdown(_title(lang0), elem_classes="app-header")
        with gr.Column(scale=2, min_width=260):
            lang = gr.Radio(list(i18n.LANGS), value=lang0, label=t("language", lang0), elem_id="lang")
            presenter = gr.Checkbox(False, label=t("presenter", lang0), info=t("presenter_info", lang0),
                                    elem_id="presenter")
    with gr.Row(equal_height=True):
        model = gr.Dropdown(store.choices, value=store.default, label=t("model", lang0),
                            info=t("model_info", lang0), elem_id="model", scale=2)
        status = gr.Markdown(model_status(store.peek(store.default), lang0), elem_id="model-status")
    current = gr.State(store.default)
    return {"model": model, "lang": lang, "presenter": presenter, "i18n": i18n, "store": store,
            "model_status": status, "_title": title, "_current_model": current,
            "compute": {"concurrency_id": "compute", "concurrency_limit": models.compute_concurrency()}}


def _title(lang):
    return f"# {t('title', lang)}\n{t('subtitle', lang)}"


def wire_header(demo, shared, tabs=None):
    """Events of the frame: model choice, language, presenter mode, deep links (?prompt=&lang=&presenter=).
    tabs: {i18n key of the tab's label: gr.Tab}, relabelled with the language."""
    tabs = tabs or {}
    store, model, lang, presenter = shared["store"], shared["model"], shared["lang"], shared["presenter"]
    status, current = shared["model_status"], shared["_current_model"]

    def on_model(key, last_good, language, progress=gr.Progress(track_tqdm=True)):
        return select_model(store, key, last_good, language, progress)

    model.input(on_model, [model, current, lang], [model, current, status], api_name="load_model",
                concurrency_id="load", concurrency_limit=1, show_progress="full", show_progress_on=[status])

    def relabel(language, key):
        return (_title(language), gr.update(label=t("language", language)),
                gr.update(label=t("presenter", language), info=t("presenter_info", language)),
                gr.update(label=t("model", language), info=t("model_info", language)),
                model_status(store.peek(key), language),
                *(gr.update(label=t(name, language)) for name in tabs))

    lang.change(relabel, [lang, model], [shared["_title"], lang, presenter, model, status, *tabs.values()],
                api_name="frame_language", queue=False)
    presenter.change(None, [presenter], None, js=PRESENTER_JS, api_name="presenter_mode", queue=False)

    def on_load(request: gr.Request):
        values = validate.deep_link(dict(request.query_params) if request else {})
        return (values.get("prompt", gr.skip()), values.get("lang", gr.skip()), values.get("presenter", gr.skip()))

    outputs = [shared["prompt"], lang, presenter] if "prompt" in shared else None
    if outputs:
        demo.load(on_load, None, outputs, api_name="deep_link", queue=False)
