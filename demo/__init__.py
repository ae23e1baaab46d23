"""The Gradio app's logic, kept apart from its wiring (app.py) and from the engine (qwen/).

    page        the whole page (frame + tabs) as one gr.Blocks, and serving it (app.py, the load test, tests)
    frame       header, language switch, presenter mode, model menu, deep links; what the tabs share
    environment every environment variable the demo reads, in one list, read in one place
    models      which models the page offers; loading one (+ MTP head + tokenizer) once per process
    choices     what a visitor may choose: every number's range, the rollbacks, rules, k=auto, tree shapes
    validate    untrusted input made safe: prompts, numbers, choices, deep links
    prompts     what the race and the stepper share: the examples, a prompt made ids, sampling, rollbacks
    tokens      tokens as text and HTML: whole characters, escaped, marked by origin (both views)
    race        plain vs speculative decoding, taking turns on the CPU, as a stream of plain-data updates
    race_html   the race as HTML: its lanes' text boxes, stats, verdict
    race_ui     the race tab: components and events
    theme       theme, the Okabe-Ito palette, plotly templates (light and dark); which static files style the page
    static/     the page's CSS (palette as CSS variables), <head> additions and event scripts, loaded by Gradio
    i18n        English and Chinese UI strings
    stepper/    the step-through view (one speculative round at a time): a sub-package
    serving     many visitors: queue position, per-session memory freed on close / when idle, request size

Everything that does work is a plain function that returns data, so tests need no browser. What the page
predicts comes from the engine's cost model (qwen.costs). The tools that measure the app (race and length
benches, load test, example labels) live in tools/.
"""
