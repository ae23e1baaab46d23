"""The plotly figures, built from traces recorded with the embedded checkpoint (assets/) and with tiny
models of known behaviour: the right panels, labels and values, and exact zeros where nothing changed."""
from dataclasses import replace

import numpy
import pytest
import torch


from demo.stepper import figures, recording as stepper_run
from demo.stepper.figures import Look
from demo.stepper.steps import Settings
from qwen import costs
from qwen.chat import Chat
from qwen.model import Model
from qwen.mtp import MTP
from qwen.weights import EMBEDDED
from stepper_models import FakeChat, counting_model

PROMPT = "The river"


@pytest.fixture(scope="module")
def embedded():
    model = Model.from_pretrained(EMBEDDED)
    return model, MTP.from_pretrained(model.cfg, EMBEDDED), Chat(model, EMBEDDED)


@pytest.fixture(scope="module")
def runs(embedded):
    """One greedy run per rollback, k = 3, on the embedded checkpoint (long enough to see rejections)."""
    model, mtp, chat = embedded
    ids = chat.encode(PROMPT)
    return {rb: stepper_run.record_run(model, mtp, chat, ids, Settings(PROMPT, k=3, rollback=rb, max_new_tokens=24,
                                                                    watch_layer=1, watch_head=1), "embedded")
            for rb in ("select", "recompute", "none")}


@pytest.fixture(scope="module")
def all_accepted():
    model, mtp = counting_model()
    return stepper_run.record_run(model, mtp, FakeChat(), torch.tensor([[3, 4]]), Settings("p", k=2, max_new_tokens=7))


def heatmaps(fig):
    return [t for t in fig.data if t.type == "heatmap"]


def rejected_round(run):
    return next(r for r in run.records[1:] if r["rolled_back"])


def by_name(fig, name):
    return next(t for t in heatmaps(fig) if t.name == name)


def test_memory_figure_reveals_its_panels_phase_by_phase(runs):
    rec = runs["select"].records[1]
    visible = {}
    for phase in ("guess", "verify", "accept"):
        fig = figures.memory_heatmaps(rec, phase)
        assert len(heatmaps(fig)) == 6
        visible[phase] = [t.name for t in heatmaps(fig) if t.visible is not False]
    assert visible == {"guess": ["before"], "verify": ["before", "after_verify", "diff_verify"],
                       "accept": ["before", "after_verify", "after", "diff_verify", "diff_after", "diff_removed"]}
    titles = [a.text for a in fig.layout.annotations]
    assert any(x.startswith("② − ①: the kept writes") for x in titles)        # select's verify wrote none
    assert any(x.startswith("② if every kept write") for x in titles)
    assert not any("what verify wrote" in x for x in titles)
    assert any(x.startswith("② − ①: what verify wrote")                        # recompute's verify did write
               for x in (a.text for a in figures.memory_heatmaps(runs["recompute"].records[1], "accept")
                         .layout.annotations))
    watch = rec["states"]["after"]["watch"]
    assert f"of L{watch['layer']}, value head {watch['head']}" in fig.layout.title.text
    scale = fig.layout.coloraxis.colorscale
    assert fig.layout.coloraxis.cmid == 0 and scale[len(scale) // 2][1] == "rgb(247,247,247)"   # white at zero
    assert fig.layout.xaxis.title.text == "value dim" and fig.layout.yaxis.title.text == "key dim"


def test_recompute_shows_snapshot_polluted_and_restored_memories_equal_to_the_engine_states(runs):
    rec = rejected_round(runs["recompute"])
    fig = figures.memory_heatmaps(rec, "accept")
    states = rec["states"]
    assert [t.name for t in heatmaps(fig)] == ["before", "after_verify", "restored", "after", "diff_verify",
                                               "diff_restore", "diff_removed"]
    assert [list(r) for r in by_name(fig, "before").z] == states["before"]["memory"]      # the snapshot
    assert [list(r) for r in by_name(fig, "after_verify").z] == states["after_verify"]["memory"]   # polluted
    assert [list(r) for r in by_name(fig, "restored").z] == states["before"]["memory"]    # restore = snapshot
    assert [list(r) for r in by_name(fig, "after").z] == states["after"]["memory"]        # after the re-run
    assert all(v == 0 for row in by_name(fig, "diff_restore").z for v in row)              # restored − snapshot
    titles = " ".join(a.text for a in fig.layout.annotations)
    assert "snapshot" in titles and "polluted" in titles and "= 0 everywhere ✓" in titles
    assert any(t.type == "scatter" and t.name == "rejected" and len(t.x) >= 1 for t in fig.data)   # marked ×


def test_select_shows_the_kept_slots_and_the_one_selected(runs):
    from demo.stepper import panels as stepper_html
    run = runs["select"]
    rec = rejected_round(run)
    r = run.records.index(rec)
    fig = figures.memory_heatmaps(rec, "accept")
    assert [list(row) for row in by_name(fig, "after").z] == rec["states"]["after"]["memory"]
    title = " ".join(a.text for a in fig.layout.annotations)
    assert f"{rec['accepted'] + 1} of {rec['k'] + 1} kept writes" in title
    assert f"{rec['k'] - rec['accepted']} rejected draft(s)" in title and "never applied" in title
    html = stepper_html.phase_panel(run, 3 * r, "English")
    assert html.count('data-slot=') == rec["k"] + 1
    assert html.count('picked" data-slot=') == rec["accepted"] + 1          # the accepted tokens' writes
    assert f'rejected" data-slot="{rec["accepted"] + 1}"' in html


def test_the_colour_scales_are_fixed_for_the_whole_run(runs):
    run = runs["recompute"]
    scales = figures.run_scales(run.records)
    ranges = {(figures.memory_heatmaps(rec, "accept", scales=scales).layout.coloraxis.cmax,
               figures.memory_heatmaps(rec, "accept", scales=scales).layout.coloraxis2.cmax) for rec in run.records[1:]}
    assert ranges == {(scales["memory"], scales["diff"])}
    cells = [abs(v) for rec in run.records for st in rec["states"].values() if st for row in st["memory"] for v in row]
    assert scales["memory"] == pytest.approx(numpy.quantile(cells, 0.99))         # clipped at the 99th percentile
    assert scales["memory"] < max(cells)
    bar = figures.memory_heatmaps(run.records[2], "accept", scales=scales).layout.coloraxis.colorbar.title.text
    assert f"clipped at the<br>99th percentile,<br>±{scales['memory']:.2g}" in bar
    own = {figures.memory_heatmaps(rec, "accept").layout.coloraxis.cmax for rec in run.records[1:]}
    assert len(own) > 1                                 # without the run's scale each round would rescale


def test_a_later_deltanet_layer_can_be_watched(runs):
    assert runs["select"].records[1]["states"]["after"]["watch"] == {"layer": 1, "head": 1}


def test_the_rollback_removes_the_rejected_drafts_write_only_when_restoring(runs, all_accepted):
    for rollback in ("select", "recompute"):
        rec = rejected_round(runs[rollback])
        removed = by_name(figures.memory_heatmaps(rec, "accept"), "diff_removed").z
        assert any(v != 0 for row in removed for v in row), rollback          # the rejected write is gone
    dirty = by_name(figures.memory_heatmaps(rejected_round(runs["none"]), "accept"), "diff_removed").z
    assert all(v == 0 for row in dirty for v in row)                          # skip the restore: still there
    for rec in all_accepted.records[1:]:                                      # nothing rejected: nothing removed
        removed = by_name(figures.memory_heatmaps(rec, "accept"), "diff_removed").z
        assert all(v == 0 for row in removed for v in row)


def test_select_and_recompute_end_every_round_in_the_same_memory(runs):
    sel, rec = runs["select"].records, runs["recompute"].records
    assert runs["select"].output_ids == runs["recompute"].output_ids
    for a, b in zip(sel[1:], rec[1:]):
        diff = figures.subtract(a["states"]["after"]["memory"], b["states"]["after"]["memory"])
        assert max(abs(v) for row in diff for v in row) < 1e-4


def test_conv_window_shifts_by_a_column_per_token_and_snaps_back(runs, embedded):
    run = runs["select"]
    rec = rejected_round(run)
    columns = embedded[0].cfg.linear_conv_kernel_dim - 1
    labels = {w: figures.conv_labels(run, rec, w, columns) for w in ("before", "after_verify", "after")}
    fig = figures.conv_strip(rec, "accept", labels)
    assert len(heatmaps(fig)) == 3 and all(len(t.z[0]) == columns for t in heatmaps(fig))
    assert list(fig.layout.xaxis2.ticktext) == labels["after_verify"] and len(labels["after"]) == columns
    assert labels["after_verify"][-1].startswith("✗") and not any(x.startswith("✗") for x in labels["after"])
    P, k, n = rec["pos"], rec["k"], rec["accepted"]
    after_verify, after = rec["states"]["after_verify"]["conv"], rec["states"]["after"]["conv"]
    # the last accepted token (at P + n): newest column after the rollback, k - n columns older after verify
    if k - n < columns:
        assert [row[-1] for row in after] == [row[-1 - (k - n)] for row in after_verify]
    assert labels["after"][-1].startswith(f"{P + n}<br>")


def test_kv_bars_grow_by_k_plus_one_and_are_cut_back(runs):
    rec = rejected_round(runs["recompute"])
    fig = figures.kv_lengths(rec, "accept")
    before, verify, after = (list(t.y) for t in fig.data)
    assert verify[:-1] == [b + rec["k"] + 1 for b in before[:-1]]
    assert after[:-1] == [b + rec["accepted"] + 1 for b in before[:-1]]
    assert list(fig.data[0].x)[-1] == "MTP head"
    assert [t.visible for t in figures.kv_lengths(rec, "guess").data] == [True, "legendonly", "legendonly"]


def test_layer_map_names_every_layer_and_the_head_with_its_status(runs, embedded):
    rec = rejected_round(runs["recompute"])
    fig = figures.layer_map(rec, "accept", Look(lang="中文"))
    names = [y for t in fig.data for y in t.y]
    assert len(names) == embedded[0].cfg.num_hidden_layers + 1 and any("MTP" in n for n in names)
    statuses = {t.name for t in fig.data}
    assert statuses == {"截断", "恢复 + 重算"} | ({"写入"} if rec["k"] == 1 else {"截断"})
    verify = figures.layer_map(rec, "verify")
    assert {t.name for t in verify.data} == {"snapshot, then written", "written", "untouched"}


def test_cost_and_acceptance_cover_every_round(runs):
    run = runs["recompute"]
    records = run.records
    cost = figures.cost_stack(run, current=2)
    assert [t.name for t in cost.data] == ["draft (head passes)", "snapshot", "verify",
                                           "accept + restore the snapshot", "re-run the accepted tokens",
                                           "the head catches up, guesses d1"]
    assert all(len(t.x) == len(records) - 1 for t in cost.data)
    assert sum(cost.data[3].y) + sum(cost.data[4].y) > 0                       # recompute restored and re-ran
    assert all(y > 0 for y in cost.data[5].y)                                 # and the head caught up every round
    assert "each round as the race runs it" in cost.layout.title.text.replace("</sub><br><sub>", " ")
    assert all(set(r["race_seconds"]) <= {"draft", "snapshot", "verify", "restore", "rerun", "catch_up"} and r["race_seconds"]
               for r in records[1:])                                 # recompute: rounds run step by step
    acc = figures.acceptance_over_run(records, current=2)
    assert list(acc.data[0].y) == [r["accepted"] for r in records[1:]]
    assert all(0 <= v <= 1 for v in acc.data[1].y)


def untimed(records):
    """Round records as a trace file without the race path's timings holds them."""
    return [{key: v for key, v in r.items() if key != "race_seconds"} for r in records]


def test_the_cost_chart_names_what_each_mode_does(runs):
    # the race runs a greedy select round as one call: so does the chart, from the same run timed again
    select = figures.cost_stack(runs["select"], current=1, look=Look(lang="中文"))
    assert [t.name for t in select.data] == ["整轮，一次调用"] and select.layout.showlegend
    assert all(set(r["race_seconds"]) == {"fused"} for r in runs["select"].records[1:])
    own = replace(runs["select"], records=untimed(runs["select"].records))     # the recording's own phases
    names = [t.name for t in figures.cost_stack(own).data]
    assert names == ["draft (head passes)", "set up a slot per token", "verify", "accept + apply the kept writes",
                     "the head catches up, guesses d1"]
    assert not any("restore" in n or "re-run" in n for n in names)           # select restores nothing


def test_the_race_path_timing_is_given_only_to_the_rounds_the_race_would_run(embedded):
    model, mtp, chat = embedded
    ids, settings = chat.encode(PROMPT), Settings(PROMPT, k=2, max_new_tokens=12)
    run = stepper_run.record_run(model, mtp, chat, ids, settings)
    good = untimed(run.records)
    stepper_run.as_raced(model, mtp, ids, good, settings, stop=(), chosen={"k": 2})
    assert len(good) > 2 and all(r["race_seconds"]["fused"] > 0 for r in good[1:])
    bad = untimed(run.records)
    bad[2]["emitted"] = [{"token": (bad[2]["emitted"][0]["token"] + 1) % 8192, "origin": "main"}]   # not its round
    stepper_run.as_raced(model, mtp, ids, bad, settings, stop=(), chosen={"k": 2})
    assert not any("race_seconds" in r for r in bad)


def test_what_if_predicts_with_the_races_cost_model_and_measurement(runs):
    assert costs.tokens_per_round(0.0, 3) == 1 and costs.tokens_per_round(1.0, 3) == 4
    assert costs.tokens_per_round(0.5, 1) == pytest.approx(1.5)
    cheap = costs.Costs(k=1, rollback="select", step=1.0, draft=0.0, verify=1.0)
    assert costs.break_even(1, cheap) == 0.0                                 # verify costs one plain step
    assert costs.break_even(1, replace(cheap, verify=1.5)) == pytest.approx(0.5)
    assert costs.break_even(1, replace(cheap, verify=3.0)) is None          # even a = 1 gives only 2 tokens
    whole = replace(cheap, k=3, whole=2.0)                                     # one call: the same cost at every a
    assert costs.speedup_at(1.0, 3, whole) == pytest.approx(2.0) and costs.break_even(3, whole) > 0
    for rollback in ("select", "recompute"):
        run = runs[rollback]
        measured = costs.Costs(**run.costs)
        assert measured.step == pytest.approx(run.plain_step_seconds, abs=1e-6) and (measured.rollback, measured.k) == (rollback, 3)
        fig = figures.what_if(run)
        curve = fig.data[0]
        assert curve.x[0] == 0 and curve.x[-1] == 1 and curve.y[-1] > curve.y[0]
        rounds = run.records[1:]
        tokens = 1 + sum(len(r["emitted"]) for r in rounds)
        for a, y in zip(curve.x[1::25], curve.y[1::25]):                      # the race's formula, point by point:
            m = costs.tokens_per_round(a, 3)                                 # a lane of this run's length
            assert y == pytest.approx(costs.predict(measured, m, 1 - a ** 3, tokens=tokens, rounds=(tokens - 1) / m))
        per_round = sum(len(r["emitted"]) for r in rounds) / len(rounds)
        back = sum(any(e["origin"] == "correction" for e in r["emitted"]) for r in rounds) / len(rounds)
        marker = next(t for t in fig.data if t.name.startswith("this run: a = "))
        # the race's lane prediction: (prefill + (tokens - 1) plain tokens) / (prefill_spec + rounds x a round)
        plain = measured.prefill + (tokens - 1) * measured.plain_token()
        spec = measured.prefill_spec + len(rounds) * measured.round_seconds(back, per_round)
        assert marker.y[0] == pytest.approx(plain / spec)
        assert f"predicted {marker.y[0]:.2f}×" in marker.name
        assert "the race's costs on this machine" in fig.layout.title.text
        caption = figures.whatif_caption(run)
        assert "as the race measures them" in caption and "the race's costs on this machine:" in caption
        ratios = measured.ratios(back, per_round)
        assert f"verify {ratios['verify']:.2f}" in caption and f"{ratios['round']:.2f} plain tokens" in caption
        assert f"work around the round {ratios['around']:.2f}" in caption
        assert f"a plain token {measured.plain_token() * 1000:.3f} ms" in caption
        rec = sum(sum(r["race_seconds"].values()) for r in rounds) / len(rounds)     # each round as the race runs it
        race = measured.passes(back)                 # the recording times the passes alone
        assert ("timed again as the race runs them" in caption) == (abs(rec / race - 1) > 0.2)
        if abs(rec / race - 1) > 0.2:
            assert f"{rec * 1000:.1f} ms on average" in caption and f"the {race * 1000:.1f} ms" in caption


def test_a_trace_without_the_races_measurement_falls_back_to_its_own_times(runs):
    run = replace(runs["select"], costs=None, plain_step_seconds=None)
    fallback = figures.run_costs(run)
    assert fallback == costs.from_records(run.records, 3, "select", fallback.step) and fallback.whole == 0
    assert "this recording's own times" in figures.what_if(run).layout.title.text
    assert "this recording's own times (no measurement" in figures.whatif_caption(run)
    assert "slower than the race" in figures.whatif_caption(run, "English")


def test_figures_use_an_explicit_light_or_dark_template(runs):
    rec = runs["select"].records[1]
    light = figures.kv_lengths(rec, "accept", Look(dark=False))
    dark = figures.kv_lengths(rec, "accept", Look(dark=True, presenter=True))
    assert light.layout.template.layout.paper_bgcolor != dark.layout.template.layout.paper_bgcolor
    assert dark.layout.font.size > light.layout.font.size


@pytest.fixture(scope="module")
def default_run(embedded):
    """The stepper's defaults on the embedded model's default prompt: k = 2, select, 48 tokens, the
    watched layer and head left to the recording (-1)."""
    from demo.prompts import DEFAULT_EXAMPLE
    model, mtp, chat = embedded
    _, prompt, raw, _ = DEFAULT_EXAMPLE
    settings = Settings(prompt, k=2, rollback="select", max_new_tokens=48, raw=raw)
    assert (settings.watch_layer, settings.watch_head) == (-1, -1)
    assert raw
    ids = chat.encode(prompt)                                                  # raw text, as the example says
    return stepper_run.record_run(model, mtp, chat, ids, settings, "embedded"), ids


def faintest_panel(run, rounds=None):
    """The faintest memory panel the figure draws at the accept phase (every panel shown) of each round
    (all, or the first `rounds`), as its largest |value| over its colour axis's range; panels that are 0
    everywhere by construction (restored − snapshot, nothing removed) are left out, and must say so."""
    scales = figures.run_scales(run.records)
    worst = float("inf")
    for rec in run.records[1:][:rounds]:
        fig = figures.memory_heatmaps(rec, "accept", scales=scales)
        empty = {a.name.split()[-1] for a in fig.layout.annotations if (a.name or "").startswith("panel-empty")}
        for trace in heatmaps(fig):
            top = fig.layout[trace.coloraxis].cmax
            peak = max(abs(v) for row in trace.z for v in row)
            if peak == 0:
                assert trace.name in empty or trace.visible is False, trace.name
                continue
            worst = min(worst, peak / top)
    return worst


@pytest.mark.parametrize("example, rollback", [(0, "select"), (0, "recompute"), (4, "select"), (1, "recompute")])
def test_every_memory_panel_of_the_first_rounds_shows_or_says_why_not(embedded, example, rollback):
    """The default prompt and two other examples, both rollbacks, the layer and head left to the recording:
    in the first three rounds each panel's largest |value| is at least FAINT of its colour scale."""
    from demo.prompts import EXAMPLES
    model, mtp, chat = embedded
    _, prompt, raw, _ = EXAMPLES[example]
    run = stepper_run.record_run(model, mtp, chat, chat.encode(prompt),
                                 Settings(prompt, k=2, rollback=rollback, max_new_tokens=24, raw=raw), "embedded")
    assert faintest_panel(run, rounds=3) >= figures.FAINT


def test_a_panel_too_faint_to_see_says_so_in_words(runs):
    rec = runs["select"].records[1]
    wiped = {**rec, "states": {**rec["states"], "before": {**rec["states"]["before"],
                                                            "memory": [[v * 1e-3 for v in row]
                                                                       for row in rec["states"]["before"]["memory"]]}}}
    scales = figures.run_scales(runs["select"].records)
    fig = figures.memory_heatmaps(wiped, "verify", scales=scales)
    assert by_name(fig, "before").visible is False and by_name(fig, "after_verify").visible is True
    words = [a.text for a in fig.layout.annotations if a.name == "panel-empty before"]
    assert words and "under 5%" in words[0].replace("<br>", " ")
    zh = figures.memory_heatmaps(wiped, "verify", Look(lang="中文"), scales=scales)
    assert any("不到色阶的 5%" in a.text.replace("<br>", "") for a in zh.layout.annotations if a.name == "panel-empty before")


def test_the_memory_views_watch_the_clearest_head_and_equal_a_run_watching_it(embedded):
    """Every (DeltaNet layer, value head) watched in turn: the one the recording chose has a faintest panel
    (over every round, by the figure's own colour scales) at least half as bright as the best one's, and
    its rewritten grids equal those of a run that watched it from the start."""
    from demo.prompts import DEFAULT_EXAMPLE
    from demo.stepper import steps
    model, mtp, chat = embedded
    _, prompt, raw, _ = DEFAULT_EXAMPLE
    ids = chat.encode(prompt)
    settings = Settings(prompt, k=2, rollback="select", max_new_tokens=16, raw=raw)
    run = stepper_run.record_run(model, mtp, chat, ids, settings, "embedded")
    layer, head = steps.watched(run)
    clarity = {}
    for lw in stepper_run.deltanet_layers(model.cfg):
        for hw in range(model.cfg.linear_num_value_heads):
            other = stepper_run.record_run(model, mtp, chat, ids, replace(settings, watch_layer=lw, watch_head=hw),
                                           "embedded")
            clarity[(lw, hw)] = faintest_panel(other)
            if (lw, hw) == (layer, head):
                for mine, theirs in zip(run.records, other.records):
                    for name in mine["states"]:
                        assert mine["states"][name]["watch"] == theirs["states"][name]["watch"] == \
                            {"layer": layer, "head": head}
                        assert numpy.allclose(mine["states"][name]["memory"], theirs["states"][name]["memory"],
                                              atol=2e-5)
    print(f"faintest panel of the chosen L{layer} head {head}: {clarity[(layer, head)]:.2f}; "
          f"best {max(clarity.values()):.2f}, worst {min(clarity.values()):.3f}")
    assert clarity[(layer, head)] >= max(figures.FAINT, 0.5 * max(clarity.values()))


def test_a_watched_attention_layer_is_its_nearest_deltanet_layer(embedded):
    deltanet = stepper_run.deltanet_layers(embedded[0].cfg)
    assert deltanet == [i for i, kind in enumerate(embedded[0].cfg.layer_types) if kind == "linear_attention"]
    attention = next(i for i in range(len(deltanet) + 2) if i not in deltanet)
    nearest = deltanet[stepper_run.nearest_deltanet(attention, deltanet)]
    assert abs(nearest - attention) == min(abs(d - attention) for d in deltanet)
    assert all(deltanet[stepper_run.nearest_deltanet(d, deltanet)] == d for d in deltanet)


def test_long_titles_wrap_for_a_phone_and_keep_their_markup():
    title = "DeltaNet memory S of L4, value head 3<br><sub>rows: key dimension, columns: value dimension</sub>"
    wrapped = figures.wrap_title(title, 30)
    lines = wrapped.split("<br>")
    assert len(lines) > 2 and wrapped.replace("<br>", " ").replace("</sub> <sub>", " ") == title.replace("<br>", " ")
    for line in lines:
        text = line.replace("<sub>", "").replace("</sub>", "")
        assert len(text) * (0.8 if "<sub>" in line else 1) <= 30, line
        assert line.count("<sub>") == line.count("</sub>")                    # every line closes what it opens
    assert figures.wrap_title(title, None) == title
    assert figures.title_margin(title, Look(narrow=True)) > figures.MARGIN["t"]


def test_a_heatmap_cell_changes_by_half_the_colour_scale_in_some_round(default_run):
    run, _ = default_run
    scales = figures.run_scales(run.records)
    reach = 0.0
    for rec in run.records[1:]:
        fig = figures.memory_heatmaps(rec, "verify", scales=scales)
        low, high = fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax
        clip = lambda v: max(low, min(high, v))                                # noqa: E731
        before, verify = by_name(fig, "before").z, by_name(fig, "after_verify").z
        reach = max([reach] + [abs(clip(a) - clip(b)) / (high - low) for ra, rb in zip(verify, before)
                               for a, b in zip(ra, rb)])
    print(f"largest change of one cell's colour in a round: {reach:.2f} of the colour scale")
    assert reach >= 0.5


def test_the_change_chart_shows_where_verify_wrote_and_what_the_rollback_took_back(default_run):
    run, _ = default_run
    rejected, accepted = rejected_round(run), next(r for r in run.records[1:] if not r["rolled_back"])
    fig = figures.memory_change(rejected, "accept")
    verify, removed = fig.data
    assert len(verify.x) == sum(la["kind"] == "deltanet" for la in rejected["states"]["after"]["layers"])
    assert any(x.startswith("▶ ") for x in verify.x) and all(v > 0 for v in verify.y) and max(removed.y) > 0
    assert max(figures.memory_change(accepted, "accept").data[1].y) == 0       # select, all accepted: nothing taken back
    assert [t.visible for t in figures.memory_change(rejected, "verify").data] == [True, "legendonly"]
