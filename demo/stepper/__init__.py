"""The "Step through it" view: one speculative round at a time (guess, verify, accept or roll back),
replayed from a run recorded once with the real engine.

    steps       a recorded run (Settings, Run) and the walk through it: step -> (round, phase), layer status
    recording   recording a run with the real engine (qwen.trace); the skip-the-restore proof
    treerec     the tree mode's notes: each tree round heard through a qwen.trace.Watch, row order beside it
    treeview    the tree mode's figures and words: the tree, masks, each node's memory, conv windows, KV slots
    modes       chain, tree and k="auto": which view each mode draws in each slot of the page
    panels      the view's HTML: phase heading, text so far, the phase's table, the proof
    figures     plotly views: layer map, memory heatmaps, conv strip, KV lengths, costs, what-if
    decision    k="auto": each round's choice of draft length, drawn and said in one sentence
    drawn       the figures sent as HTML that the page draws itself (static/step-figures.html)
    traceio     record and replay of runs as JSON: trace export and a strict importer
    ui          the tab's components and events (api `step_*`, `trace_*`)

Nothing is imported here, so importing one module
does not load the others (steps and panels need neither torch nor gradio).
"""
