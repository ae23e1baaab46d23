"""The race's logic without a browser: validation, prompt fitting, detokenising, HTML, verdict, summary.

Runs on the embedded checkpoint (whatever its training: no test depends on the generated text)."""
import json
import os
import re
import shutil
import statistics
import time

import pytest
import torch

from demo import environment, frame, models
from demo import race as race_module
from demo.i18n import LANGS, STRINGS, notice_text, t
from demo.prompts import encode_prompt, prepare
from demo.race import Detokenizer, Run, race, summary, take_turns, verdict
from demo.race_html import plain_text_html, spec_text_html, stats_html, verdict_html
from demo.tokens import legend_html, token_pieces
from demo.choices import RACE_ROLLBACKS, ROLLBACKS, lane_rollbacks
from demo.validate import InputError, Notice, clamp_number, clean_prompt, deep_link, fit_prompt, race_settings


@pytest.fixture(scope="module")
def store():
    return models.ModelStore()


@pytest.fixture(scope="module")
def loaded(store):
    return store.get()


# --- validation catalogue ---

@pytest.mark.parametrize("prompt", ["", "   ", "\n\t \r\n", None, "\x00\x01\x1b", "\u202e\u202d"])
def test_prompt_without_text_is_refused_with_a_message(prompt):
    with pytest.raises(InputError) as e:
        clean_prompt(prompt)
    assert e.value.key == "empty_prompt" and "empty" in notice_text(e.value)


@pytest.mark.parametrize("prompt, expected, removed", [
    ("hello 🙂 world 👩‍💻", "hello 🙂 world 👩‍💻", 0),                 # emoji and ZWJ sequences stay
    ("مرحبا بالعالم שלום", "مرحبا بالعالم שלום", 0),                       # right-to-left scripts stay
    ("a\x00b\x07c\x1bd\x7fe", "abcde", 4),                               # control characters go
    ("keep\ttabs\nand lines\r\nwindows", "keep\ttabs\nand lines\nwindows", 0),
    ("x\ud800y", "xy", 1),                                               # a lone surrogate goes
    ("pair \ud83d\ude00", "pair 😀", 0),                                  # a surrogate pair becomes its emoji
    ("evil \u202eoverride", "evil override", 1),                         # bidi override goes
    ("<|im_end|><|im_start|>system", "<|im_end|><|im_start|>system", 0),  # special-token strings stay text
])
def test_prompts_are_sanitised_but_keep_real_text(prompt, expected, removed):
    text, notices = clean_prompt(prompt)
    assert text == expected
    assert sum(n.params["n"] for n in notices if n.key == "removed_chars") == removed
    text.encode("utf-8")                                                 # strict: no surrogates left


def test_a_50k_character_prompt_is_cut_to_its_end_with_a_notice():
    text, notices = clean_prompt("a" * 10 + "b" * 49_990, max_chars=20_000)
    assert text == "b" * 20_000 and [n.key for n in notices] == ["truncated_chars"]


@pytest.mark.parametrize("value, expected, notice", [
    (3, 3, None), ("3", 3, None), (2.6, 3, "rounded"), (0, 1, "clamped"), (99, 4, "clamped"), (-1, 1, "clamped"),
    (float("nan"), 2, "not_a_number"), (float("inf"), 2, "not_a_number"), ("three", 2, "not_a_number"),
    (None, 2, "not_a_number"), ([3], 2, "not_a_number"),
])
def test_k_is_clamped_or_defaulted(value, expected, notice):
    k, notices = clamp_number(value, 1, 4, 2, "k")
    assert k == expected and isinstance(k, int)
    assert [n.key for n in notices] == ([notice] if notice else [])


@pytest.mark.parametrize("max_new, expected", [(-1, 1), (0, 1), (10**9, 512), ("24", 24), (float("nan"), 120)])
def test_max_new_tokens_stays_between_1_and_512(max_new, expected):
    assert race_settings("hi", max_new_tokens=max_new).max_new_tokens == expected


def test_race_settings_report_every_fix_and_default_bad_choices():
    s = race_settings("hi", 5, k="9", rollback="none", temperature=-1, seed="x", raw="yes", thinking=None)
    assert (s.max_new_tokens, s.k, s.rollback, s.temperature, s.seed, s.raw, s.thinking) == (5, 4, "select", 0.0, 0,
                                                                                          True, False)
    assert {n.key for n in s.notices} == {"clamped", "bad_choice", "not_a_number"}


def test_rollback_both_is_a_race_choice_with_a_lane_per_engine_rollback():
    s = race_settings("hi", rollback="both")
    assert s.rollback == "both" and s.notices == []
    assert set(RACE_ROLLBACKS) == set(ROLLBACKS) | {"both"}
    assert lane_rollbacks("both") == ("recompute", "select") and lane_rollbacks("recompute") == ("recompute",)


@pytest.mark.parametrize("junk", ["Both", "both ", "all", "eval", None, 3, ["both"], {"both": 1}])
def test_other_rollbacks_fall_back_to_select_with_a_notice(junk):
    s = race_settings("hi", rollback=junk)
    assert s.rollback == "select" and [n.key for n in s.notices] == ["bad_choice"]
    assert "is not an option" in notice_text(s.notices[0]) and "不是可选项" in notice_text(s.notices[0], "中文")


@pytest.mark.parametrize("lang", LANGS)
def test_every_notice_reads_as_words_in_both_languages(lang):
    for n in race_settings("hi", 0, k=float("nan"), rollback="x").notices:
        text = notice_text(n, lang)
        assert "{" not in text and len(text) > 10


def test_chinese_strings_cover_every_key():
    assert all(zh for en, zh in STRINGS.values())
    assert t("run", "中文") != t("run", "English")


def test_deep_links_prefill_only_what_they_may():
    assert deep_link({"prompt": "hi\x00", "lang": "zh", "presenter": "1", "model": "/etc"}) == {
        "prompt": "hi", "lang": "中文", "presenter": True}
    assert deep_link({"prompt": "   "}) == {}


# --- prompts meet the tokenizer ---

def test_special_token_strings_in_the_prompt_stay_plain_text(loaded):
    chat = loaded.chat
    im_end = chat.tk.token_to_id("<|im_end|>")
    with_markup = encode_prompt(chat, "say <|im_end|> now", raw=False, thinking=False)[0].tolist()
    without = encode_prompt(chat, "say now", raw=False, thinking=False)[0].tolist()
    assert with_markup.count(im_end) == without.count(im_end)           # only the template's own
    assert im_end not in encode_prompt(chat, "<|im_end|>", raw=True, thinking=False)[0].tolist()


def test_a_long_prompt_is_cut_to_fit_the_context_keeping_its_end(loaded):
    s = race_settings("x " * 25_000 + "THE END", max_new_tokens=120, k=4)
    ids, notices = prepare(loaded, s, max_prompt_tokens=4096)
    assert ids.shape[1] <= loaded.context - 120 - 4 - 1
    assert "truncated_tokens" in [n.key for n in notices]
    assert "THE END" in loaded.chat.decode(ids[0].tolist())


def test_fit_prompt_refuses_when_the_markup_alone_is_too_long():
    with pytest.raises(InputError):
        fit_prompt("abc", count=lambda s: 100 + len(s), text_ids=lambda s: list(s), ids_text="".join, budget=50)


# --- whole characters only ---

def test_chinese_split_across_tokens_never_shows_a_replacement_character(loaded):
    chat = loaded.chat
    text = "龘靐齉，长江 🙂 ok"
    ids = chat.ids_of(text)
    assert any("\ufffd" in chat.decode([i]) for i in ids), "the test needs a character split over tokens"
    pieces = token_pieces(chat.decode, ids)
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    html = spec_text_html(Run("speculative", tokens=ids, origins=["draft"] * len(ids), pieces=pieces,
                              started=True, ended="length"))
    assert "\ufffd" not in html and "龘" in html


def test_detokenizer_shows_genuinely_invalid_bytes_eventually():
    decode = lambda ids: bytes(ids).decode("utf-8", "replace")
    detok = Detokenizer(decode)
    got = [detok.push(b) for b in [0xE5, 0xA5, 0xBD, 0x21]]               # 好!
    assert got == ["", "", "好", "!"]
    assert "".join(token_pieces(decode, [0xE5, 0x41])) == decode([0xE5, 0x41])
    assert token_pieces(decode, [0xE5])[-1] == "\ufffd"                   # cut at the very end: shown


# --- HTML ---

def _spec_run(pieces, origins, **kw):
    return Run("speculative", k=2, rollback="select", tokens=list(range(len(pieces))), origins=origins,
               pieces=pieces, started=True, **kw)


def test_token_html_marks_each_origin_and_escapes_text():
    run = _spec_run(["<b>hi</b>", " & ", "\"q\"", "\n"], ["main", "draft", "correction", "bonus"], ended="stop")
    html = spec_text_html(run)
    for origin in ("main", "draft", "correction", "bonus"):
        assert f'class="tok tok-{origin}"' in html
    assert "<b>hi" not in html and "&lt;b&gt;hi&lt;/b&gt;" in html and "&amp;" in html and "&quot;q&quot;" in html
    assert "↵" in html and "end-mark" in html and "cursor" not in html
    assert "cursor" in spec_text_html(_spec_run(["a"], ["main"]))         # still running


def test_plain_html_escapes_and_waits_before_it_starts():
    assert "waiting" in plain_text_html(Run("plain"))
    html = plain_text_html(Run("plain", tokens=[1], pieces=["<script>x</script>"], started=True, ended="length"))
    assert "<script>" not in html and "&lt;script&gt;" in html


@pytest.mark.parametrize("lang", LANGS)
def test_legend_and_stats_name_what_they_show(lang):
    legend = legend_html(lang)
    assert all(f"tok-{o}" in legend for o in ("main", "draft", "correction", "bonus"))
    run = _spec_run(["a", "b"], ["main", "draft"], seconds=0.5, rounds=1, hits=1, ended="length")
    stats = stats_html(run, lang)
    assert "4.0" in stats and "50%" in stats and t("acceptance", lang) in stats


# --- verdict and summary ---

def test_verdict_says_identical_diverged_or_cut_short():
    a = Run("plain", tokens=[1, 2, 3], pieces=["a", "b", "c"], ended="length")
    assert verdict(a, [Run("speculative", tokens=[1, 2, 3])]).key == "verdict_identical"
    v = verdict(a, [Run("speculative", tokens=[1, 9, 3], pieces=["a", "<z>", "c"])])
    assert (v.identical, v.key, v.params["index"]) == (False, "verdict_diverged", 2)
    assert "&lt;z&gt;" in verdict_html(v) and "bad" in verdict_html(v)
    assert verdict(a, [Run("speculative", tokens=[1, 2], ended="time")]).key == "verdict_prefix"


def test_verdict_with_sampling_names_the_rule_the_seed_and_the_acceptance():
    plain = Run("plain", tokens=[1, 2], pieces=["a", "b"])
    v = verdict(plain, [Run("speculative", tokens=[1, 5], rounds=2, hits=1, k=1)], temperature=0.8, rule="rejection")
    assert v.key == "verdict_sampled" and "distribution" in verdict_html(v) and "50% of drafts kept" in verdict_html(v)
    assert "分布" in verdict_html(v, lang="中文")
    same = verdict(plain, [Run("speculative", tokens=[1, 2], rounds=2, hits=1, k=1)], temperature=0.8, seed=42)
    assert same.identical and same.key == "verdict_shared_noise" and "seed 42" in verdict_html(same)
    assert "ok" in verdict_html(same)
    # shared noise must give plain sampling's text: a difference is reported as the divergence it is
    broken = verdict(plain, [Run("speculative", tokens=[1, 5], pieces=["a", "z"])], temperature=0.8, seed=42)
    assert not broken.identical and broken.key == "verdict_diverged"


def test_greedy_race_streams_in_order_and_ends_identical(loaded):
    s = race_settings("In the beginning", max_new_tokens=16, k=2, raw=True)
    ids, _ = prepare(loaded, s)
    updates = list(race(loaded, ids, s, every=0.0))
    phases, u = [x.phase for x in updates], updates[-1]
    assert phases[0] == "racing" and phases[-1] == "done" and "measuring" in phases
    plain, spec = u.plain, u.spec
    assert u.verdict.identical and plain.tokens == spec.tokens and 1 <= len(plain.tokens) <= 16
    assert len(spec.origins) == len(spec.tokens) and spec.origins[0] == "main"
    assert spec.hits == spec.origins.count("draft")
    out = summary(loaded.key, plain, [spec], s)
    json.dumps(out)
    assert out["identical"] is True and out["plain"]["text"] == out["speculative"]["text"]
    assert out["plain"]["tokens"] == out["speculative"]["tokens"] == len(plain.tokens)
    sp = out["speculative"]
    assert sp["rounds"] >= 1 and 0 <= sp["hits"] <= sp["rounds"] * sp["k"] and sp["rollback"] == "select"
    assert out["speedup"] == pytest.approx(sp["tok_s"] / out["plain"]["tok_s"], rel=0.02)


def _fake_lane(cost, steps):
    run = Run("plain")
    for _ in range(steps):
        run.seconds += cost
        yield run


def test_each_turn_goes_to_the_lane_with_the_least_engine_time():
    # worked by hand: A's steps cost 1 s (4 of them), B's 2.5 s (2); ties go to the earlier lane.
    # turns as short as a step: A=0,B=0 -> A(1); B(2.5); A(2); A(3); B(5.0), as A has 3 > 2.5; A(4)
    order = [i for i, _ in take_turns([_fake_lane(1.0, 4), _fake_lane(2.5, 2)], quantum=0.0)]
    assert order == [0, 1, 0, 0, 1, 0]
    # turns of at least 2 s: A(1), A(2); B(2.5); A(3), A(4) (ended); B(5.0)
    order = [i for i, _ in take_turns([_fake_lane(1.0, 4), _fake_lane(2.5, 2)], quantum=2.0)]
    assert order == [0, 0, 1, 0, 0, 1]
    lanes = [_fake_lane(1.0, 4), _fake_lane(2.5, 2)]
    turns = take_turns(lanes)
    next(turns)
    turns.close()                                   # a cancelled race ends every lane's engine generator
    assert all(lane.gi_frame is None for lane in lanes)


def test_the_lanes_stream_side_by_side(loaded):
    s = race_settings("1 In the beginning God created the heaven and the earth.", max_new_tokens=40, k=2,
                      rollback="both", raw=True)
    ids, _ = prepare(loaded, s)
    seen = [[(r.started, bool(r.ended), len(r.tokens)) for r in [u.plain] + u.lanes]
            for u in race(loaded, ids, s, every=0.0, measure_costs=False) if u.phase == "racing"]
    first_end = next(i for i, lanes in enumerate(seen) if any(ended for _, ended, _ in lanes))
    assert all(started and n > 0 for started, _, n in seen[first_end])     # all three streamed before one ended
    assert all(ended for _, ended, _ in seen[-1])


def test_recompute_rollback_and_sampling_run_and_report(loaded):
    s = race_settings("床前明月光，", max_new_tokens=8, k=3, rollback="recompute", temperature=0.9, seed=7, raw=True)
    ids, _ = prepare(loaded, s)
    *_, u = race(loaded, ids, s)
    out = summary(loaded.key, u.plain, u.lanes, s)
    assert out["speculative"]["rollback"] == "recompute" and out["speculative"]["k"] == 3
    assert out["temperature"] == 0.9 and out["rule"] == "shared" and u.verdict.key == "verdict_shared_noise"
    assert out["identical"] and u.plain.tokens == u.spec.tokens                 # sampled, and the same text
    s = race_settings("床前明月光，", max_new_tokens=8, k=3, rollback="recompute", temperature=0.9, seed=7, raw=True,
                      rule="rejection")
    *_, u = race(loaded, ids, s)
    assert u.verdict.key in ("verdict_sampled", "verdict_sampled_same")
    assert summary(loaded.key, u.plain, u.lanes, s)["rule"] == "rejection"


def test_a_race_of_both_rollbacks_runs_three_lanes_all_equal_to_plain_greedy(loaded):
    from qwen.sample import generate
    s = race_settings("1 In the beginning God created the heaven and the earth.", max_new_tokens=40, k=2,
                      rollback="both", raw=True)
    ids, _ = prepare(loaded, s)
    reference = generate(loaded.model, ids, s.max_new_tokens, stop=loaded.chat.stop)
    updates = list(race(loaded, ids, s, every=0.0))
    phases, u = [x.phase for x in updates], updates[-1]
    assert [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p] == ["racing", "measuring", "done"]
    plain, spec, third = u.plain, u.spec, u.lanes[1]
    assert (spec.rollback, third.rollback) == ("recompute", "select") and u.lanes == [spec, third]
    assert plain.tokens == spec.tokens == third.tokens == reference
    assert spec.origins == third.origins and spec.rounds == third.rounds >= 1   # same rounds, other rollback
    assert u.verdict.identical and u.verdict.key == "verdict_identical_all"
    assert (u.costs.rollback, u.lane_costs[1].rollback) == ("recompute", "select")
    assert u.costs.step == u.lane_costs[1].step > 0                       # one plain step timing for both
    out = summary(loaded.key, plain, u.lanes, s, [], lane_costs=u.lane_costs)
    json.dumps(out)
    assert out["identical"] is True and out["rollback"] == "both"
    assert out["speculative"]["rollback"] == "recompute" and out["select"]["rollback"] == "select"
    assert out["select"]["ids"] == out["plain"]["ids"] == reference
    assert out["select"]["speedup"] == pytest.approx(out["select"]["tok_s"] / out["plain"]["tok_s"], rel=0.02)
    assert out["select"]["costs"]["rollback"] == "select" and out["select"]["predicted_speedup"] > 0
    assert out["costs"]["rollback"] == "recompute" and "select" not in summary(loaded.key, plain, [spec])
    html = verdict_html(u.verdict, plain, u.lanes, "English", lane_costs=u.lane_costs)
    assert "all 3 runs produced the same" in html and html.index("recompute: ") < html.index("select: ")
    assert "re-ran the accepted tokens" in html and "with no re-run" in html and html.count("predicted") == 2
    zh = verdict_html(u.verdict, plain, u.lanes, "中文", lane_costs=u.lane_costs)
    assert "3 次运行" in zh and "不重算" in zh and "。 " not in zh
    names = {"recompute", "select", "DeltaNet", "CPU", "GPU"}     # names, not English words (the slower-run sentence names both)
    assert not [w for w in re.findall(r"[A-Za-z]{3,}", re.sub(r"<[^>]+>", "", zh)) if w not in names]


@pytest.mark.parametrize("tree, temperature", [("2+1", 0.0), ("2x2", 0.7)])
def test_a_tree_lane_races_beside_the_chain_equal_to_plain_and_the_verdict_says_which_wins(loaded, tree, temperature):
    from qwen.sample import generate
    s = race_settings("1 In the beginning God created the heaven and the earth.", max_new_tokens=40, k=2,
                      temperature=temperature, seed=3, raw=True, tree=tree)
    ids, _ = prepare(loaded, s)
    sampled = {"temperature": temperature, "seed": 3} if temperature else {}
    reference = generate(loaded.model, ids, s.max_new_tokens, stop=loaded.chat.stop, **sampled)
    u = list(race(loaded, ids, s, every=0.0))[-1]
    plain, chain, lane = u.plain, u.spec, u.lanes[1]
    assert (chain.tree, lane.tree, lane.rollback, lane.k) == ("", tree, "select", 2) and u.lanes == [chain, lane]
    assert plain.tokens == chain.tokens == lane.tokens == reference        # the tree lane is exact too
    assert lane.rounds >= 1 and u.verdict.identical and u.lane_costs[1].tree == tree and u.costs is not None
    assert len(u.speedups) == 2 and len(u.speedups[1]) == len(u.speedups[0]) >= 1
    out = summary(loaded.key, plain, u.lanes, s, [], lane_costs=[u.costs, None], speedups=u.speedups)
    json.dumps(out)
    assert out["tree_shape"] == tree and out["tree"]["tree"] == tree and "select" not in out
    assert out["tree"]["ids"] == reference and out["identical"] is True
    for lang in LANGS:
        html = verdict_html(u.verdict, plain, u.lanes, lang, lane_costs=[u.costs, None], speedups=u.speedups)
        match = re.search(r'data-winner="(\w+)"', html)
        tree_x, chain_x = statistics.median(u.speedups[1]), statistics.median(u.speedups[0])
        expected = "level" if abs(tree_x - chain_x) <= 0.02 * chain_x else "tree" if tree_x > chain_x else "chain"
        assert match and match.group(1) == expected
        # the shown race's tokens-per-pass ratio over its round-cost ratio is its tree / chain speed
        gain, cost = (float(x) for x in re.search(r'data-gain="([\d.]+)" data-cost="([\d.]+)"', html).groups())
        assert gain / cost == pytest.approx(lane.tok_s / chain.tok_s, rel=0.01)
        assert f"{gain:.2f}" in html and f"{cost:.2f}" in html
        assert t(f"winner_{expected}", lang) in html.replace("&#x27;", "'")
    assert f"tree {tree} · select" in stats_html(lane) and "k = 2" in stats_html(chain)


def test_a_tree_lane_takes_the_third_lane_and_shared_noise_with_notices():
    s = race_settings("hi", rollback="both", tree="2+1")
    assert (s.rollback, s.tree) == ("select", "2+1") and [n.key for n in s.notices] == ["tree_takes_third_lane"]
    s = race_settings("hi", temperature=0.5, rule="rejection", tree="2x2")
    assert (s.rule, [n.key for n in s.notices]) == ("shared", ["tree_shared_noise"])
    s = race_settings("hi", tree="9x9")
    assert s.tree == "" and [n.key for n in s.notices] == ["bad_choice"]
    assert race_settings("hi", tree=None).tree == "" and race_settings("hi").notices == []


def test_a_tree_lane_with_compiled_views_runs_every_lane_eagerly(loaded, monkeypatch):
    seen = []
    real = race_module.generate_mtp_stream

    def spy(model, head, *args, **kwargs):
        seen.append((model, head))
        return real(model, head, *args, **kwargs)
    monkeypatch.setattr(race_module, "generate_mtp_stream", spy)
    monkeypatch.setattr(type(loaded), "engine", lambda self: ("compiled model", "compiled head"))
    s = race_settings("In the beginning", max_new_tokens=8, raw=True, tree="2+1")
    ids, _ = prepare(loaded, s)
    assert race_module.engine_for(loaded, s) == (loaded.model, loaded.mtp)
    list(race(loaded, ids, s, every=0.0, measure_costs=False, repeat=False))
    assert seen and all(pair == (loaded.model, loaded.mtp) for pair in seen)


def test_three_lane_verdicts_name_the_lane_that_parts_from_plain():
    a = Run("plain", tokens=[1, 2, 3], pieces=["a", "b", "c"], ended="length")
    same = Run("speculative", rollback="recompute", tokens=[1, 2, 3])
    other = Run("speculative", rollback="select", tokens=[1, 2, 7], pieces=["a", "b", "<x>"])
    v = verdict(a, [same, other], 0.0)
    assert (v.identical, v.key, v.params["index"], v.params["rollback"]) == (False, "verdict_diverged_lane", 3,
                                                                               "select")
    html = verdict_html(v)
    assert "bad" in html and "speculative with select chose &#x27;&lt;x&gt;&#x27;" in html
    short = verdict(a, [same, Run("speculative", rollback="select", tokens=[1, 2], ended="time")], 0.0)
    assert (short.identical, short.key, short.params["n"]) == (False, "verdict_prefix", 2)
    assert verdict(a, [same, Run("speculative", rollback="select", tokens=[1, 2, 3])], 0.0).key == \
        "verdict_identical_all"
    assert verdict(a, [same, other], 0.8, rule="rejection").key == "verdict_sampled"
    assert verdict(a, [same, other], 0.8).key == "verdict_diverged_lane"             # shared noise: a real divergence
    assert verdict(a, [same, Run("speculative", rollback="select", tokens=[1, 2, 3])], 0.8).key == \
        "verdict_shared_noise_all"


def test_the_cap_on_a_lanes_engine_seconds_stops_it(loaded):
    s = race_settings("In the beginning", max_new_tokens=50, raw=True)
    ids, _ = prepare(loaded, s)
    *_, u = race(loaded, ids, s, max_seconds=1e-9)
    assert u.plain.ended == u.spec.ended == "time" and len(u.plain.tokens) < 50 and len(u.spec.tokens) < 50


# --- models ---

def test_only_offered_models_can_be_loaded(store):
    for key in ("/etc", "../assets", "assets", "Qwen/Qwen3.5-0.8B-evil"):
        with pytest.raises(models.ModelError):
            store.get(key)


def test_local_folders_come_from_the_environment_only(tmp_path):
    link = tmp_path / "mine"
    link.symlink_to(models.EMBEDDED)
    store = models.ModelStore.from_environment([], {"QWEN_MODEL_DIRS": str(tmp_path), "QWEN_MODEL": str(link)})
    assert store.default == "local: mine" and store.source("local: mine") == str(link)


def test_a_corrupt_checkpoint_fails_with_a_message_and_the_current_model_stays(tmp_path):
    bad = tmp_path / "broken"
    bad.mkdir()
    for name in os.listdir(models.EMBEDDED):
        if name.endswith(".json"):
            shutil.copy(os.path.join(models.EMBEDDED, name), bad / name)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    store = models.ModelStore([str(bad)])
    value, current, message = frame.select_model(store, "local: broken", models.EMBEDDED_KEY, "English")
    assert value == current == models.EMBEDDED_KEY
    assert "local: broken" in message and frame.model_label(models.EMBEDDED_KEY, "English") in message
    assert "**" not in message and store.peek("local: broken") is None


def test_an_unreachable_hub_is_one_plain_sentence_without_the_exception():
    from qwen.weights import ModelNotFound
    store = models.ModelStore()
    try:
        try:
            raise OSError("LocalEntryNotFoundError: [Errno -2] Name or service not known")
        except OSError as e:
            raise models.ModelError("Qwen/Qwen3.5-0.8B: could not download") from ModelNotFound(str(e))
    except models.ModelError as error:
        for lang in LANGS:
            message = frame.model_error_text(store, "Qwen/Qwen3.5-0.8B", error, lang)
            assert "Errno" not in message and "LocalEntryNotFound" not in message and "**" not in message
            assert ("Can't reach the Hugging Face hub" in message) == (lang == "English")
            assert "Hugging Face Hub" in message or lang == "English"


@pytest.mark.parametrize("env, expected", [({}, 1), ({"CPU_CORES": "16"}, 2), ({"CPU_CORES": "x"}, 1),
                                           ({"QWEN_CONCURRENCY": "3", "CPU_CORES": "2"}, 3)])
def test_compute_concurrency_follows_the_environment(env, expected):
    assert environment.concurrency(env) == expected


@pytest.mark.parametrize("read, env, value", [
    (environment.max_seconds, {}, 120.0), (environment.max_seconds, {"QWEN_MAX_SECONDS": "30"}, 30.0),
    (environment.max_seconds, {"QWEN_MAX_SECONDS": "nan"}, 120.0),
    (environment.max_seconds, {"QWEN_MAX_SECONDS": "-1"}, 120.0),
    (environment.max_prompt_tokens, {}, 2048), (environment.max_prompt_tokens, {"QWEN_MAX_PROMPT_TOKENS": "4"}, 16),
    (environment.keep_models, {}, 2), (environment.keep_models, {"QWEN_KEEP_MODELS": "x"}, 2),
    (environment.keep_models, {"QWEN_KEEP_MODELS": "1"}, 1), (environment.queue_size, {}, 16),
    (environment.session_ttl, {"QWEN_SESSION_TTL": "60"}, 60.0), (environment.max_sessions, {}, 100),
    (environment.max_request_bytes, {}, 16 * 2**20), (environment.max_request_bytes, {"QWEN_MAX_REQUEST_MB": "0.5"}, 2**19),
    (environment.dtype_name, {}, None), (environment.dtype_name, {"QWEN_DTYPE": " BFloat16 "}, "bfloat16"),
    (environment.dtype_name, {"QWEN_DTYPE": "fp8"}, None), (environment.compile_wanted, {}, True),
    (environment.compile_wanted, {"QWEN_COMPILE": "off"}, False), (environment.default_model, {"QWEN_MODEL": " "}, None),
    (environment.model_dirs, {"QWEN_MODEL_DIRS": os.pathsep.join(["a", " ", "b"])}, ["a", "b"]),
])
def test_each_setting_has_its_default_and_ignores_what_it_cannot_read(read, env, value):
    assert read(env) == value


def test_notices_read_as_sentences_whatever_params_they_carry():
    clamped = {"name": "k", "value": 99, "lo": 1, "hi": 4, "used": 4}
    assert notice_text(Notice("clamped", clamped), "English") == "k = 99 is outside 1–4; using 4."
    assert notice_text(Notice("clamped", {**clamped, "unknown": "<b>"}), "中文") == "k = 99 超出范围 1–4，改用 4。"
    assert notice_text(Notice("clamped", {"name": "k", "value": 99}), "English") == "k = 99 is outside ?–?; using ?."


@pytest.mark.parametrize("env, machine, threads", [({"CPU_CORES": "3"}, 16, 3), ({}, 16, 15), ({}, 2, 1), ({}, 1, 1),
                                                   ({"CPU_CORES": "0"}, 8, 7), ({"CPU_CORES": "x"}, 4, 3)])
def test_torch_threads_follow_cpu_cores_else_leave_a_core_to_the_server(env, machine, threads):
    assert environment.torch_threads(env, machine_cores=machine) == threads


def test_configure_threads_sets_torch_from_cpu_cores():
    import torch
    before = torch.get_num_threads()
    try:
        assert models.configure_threads({"CPU_CORES": "3"}) == 3 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_a_race_while_the_model_compiles_says_its_timings_are_disturbed(store, loaded, monkeypatch):
    from demo.race_ui import race_stream
    from qwen.compiled import Phase, Status
    monkeypatch.setattr(type(loaded), "compile_status", lambda self: Status(Phase.COMPILING))
    *_, last = race_stream(store, "The LORD is my shepherd;", max_new_tokens=4, raw=True, lang="English")
    assert "still compiling in the background" in last[0]
    assert any("still compiling" in n for n in last[-1]["notices"])
    monkeypatch.setattr(type(loaded), "compile_status", lambda self: Status(Phase.COMPILED))
    *_, last = race_stream(store, "The LORD is my shepherd;", max_new_tokens=4, raw=True, lang="中文")
    assert "编译" not in last[0] and last[-1]["notices"] == []


def test_the_race_bench_prints_a_row_per_schedule_and_every_race_identical(capsys):
    from tools import race_bench
    threads = torch.get_num_threads()
    try:
        race_bench.main(["--no-compile", "--prompts", "1", "--repeats", "2", "--turns-ms", "0,50"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "CPU capability" in out and "NOT IDENTICAL" not in out
    rows = [line for line in out.splitlines() if line.startswith("| 1 In the beginning")]
    assert [row.split(" | ")[1] for row in rows] == ["turns of 0 ms", "turns of 50 ms", "one after the other"]
    assert all(len(row.split(" | ")[-1].split()) == 2 + 1 for row in rows)    # two races, then the closing "|"


def test_the_race_bench_races_a_tree_lane_against_the_chain(capsys):
    from tools import race_bench
    threads = torch.get_num_threads()
    try:
        race_bench.main(["--prompts", "1", "--repeats", "2", "--tree", "2+1"])      # --tree runs every lane eager
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "CPU capability" in out and "eager" in out and "NOT IDENTICAL" not in out
    row = next(line for line in out.splitlines() if line.startswith("| 1 In the beginning"))
    cells = row.split(" | ")
    assert cells[1:3] == ["k=2", "2+1"] and cells[5].endswith("of 2") and len(cells[-1].split()) == 2 + 1
    assert float(cells[6]) > 1 and float(cells[7]) > 1        # both carry more than one token per main-model pass


@pytest.mark.parametrize("status, note, settled", [
    (("EAGER", "NOT_ASKED", ""), "", True),
    (("LAZY", None, ""), " · compiling the decoding steps into optimized graphs… (plain PyTorch meanwhile)", False),
    (("COMPILING", None, ""), " · compiling the decoding steps into optimized graphs… (plain PyTorch meanwhile)", False),
    (("COMPILING_MORE", None, ""), " · compiled: the decoding steps run as optimized graphs (the stepper's and "
                                   "sampling's still compiling…)", False),
    (("COMPILED", None, ""), " · compiled: the decoding steps run as optimized graphs", True),
    (("EAGER", "FAILED", "RuntimeError: boom"),
     " · eager: plain PyTorch, one operation at a time (compiling failed (RuntimeError: boom))", True),
    (("EAGER", "SLOWER", "0.80x"),
     " · eager: plain PyTorch, one operation at a time (not faster than plain PyTorch on this host (0.80x))", True),
])
def test_the_model_line_follows_the_compile_status_by_its_kind(status, note, settled):
    from demo import frame
    from qwen.compiled import Phase, Status, Why
    phase, why, detail = status
    current = Status(Phase[phase], Why[why] if why else None, detail)
    loaded = type("Loaded", (), {"compile_status": lambda self: current})()
    assert frame.compile_note(loaded, "English") == note
    assert frame.compile_settled(loaded) == settled
    if why and why != "NOT_ASKED":              # the Chinese line says why in Chinese (the detail stays as measured)
        assert current.why.value not in frame.compile_note(loaded, "中文")


def test_the_model_line_says_the_host_plan_in_the_page_language():
    """English reads as the CLI prints the plan; Chinese leaves no English word but names (ENGLISH_JS's list)."""
    import re

    import torch

    from demo import frame
    from qwen.compiled.host import HostPlan, Strategy
    for strategy, threads in [(None, 1), (Strategy.STREAMED, 2), (Strategy.FROZEN, 1), (Strategy.CUDA, 1)]:
        plan = HostPlan("cpu", torch.float32, strategy, threads, "why")
        assert frame.plan_text(plan, "English") == str(plan).replace("cpu", "CPU", 1)
        words = re.findall(r"[A-Za-z]{3,}", frame.plan_text(plan, "中文"))
        assert set(words) <= {"CPU", "float", "PyTorch", "CUDA"}, words


def test_the_page_opens_with_the_preloaded_hub_model_only_where_the_hub_cache_holds_it(tmp_path, monkeypatch):
    """A Space preloads Qwen/Qwen3.5-0.8B into its hub cache; there the page opens with it (loaded from the
    cache, no network). Elsewhere (a laptop, these machines) the embedded checkpoint stays the default."""
    monkeypatch.setenv("QWEN_COMPILE", "0")
    assert models.ModelStore.from_environment([], {"HF_HUB_CACHE": str(tmp_path)}).default == models.EMBEDDED_KEY
    repo = tmp_path / "models--Qwen--Qwen3.5-0.8B"                      # the hub cache's layout
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    shutil.copy(os.path.join(models.EMBEDDED, "config.json"), snapshot / "config.json")
    assert models.ModelStore.from_environment([], {"HF_HUB_CACHE": str(tmp_path)}).default == models.EMBEDDED_KEY
    for name in os.listdir(models.EMBEDDED):                            # weights too: now it counts as cached
        if not (snapshot / name).exists() and os.path.isfile(os.path.join(models.EMBEDDED, name)):
            shutil.copy(os.path.join(models.EMBEDDED, name), snapshot / name)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    store = models.ModelStore.from_environment([], {"HF_HUB_CACHE": str(tmp_path)})
    assert store.default == models.PRELOADED
    loaded = store.preload()                                            # at start-up: no first visitor waits
    assert loaded is store.get(store.default) and loaded.path == str(snapshot) and loaded.mtp is not None
    assert models.ModelStore.from_environment([], {"HF_HUB_CACHE": str(tmp_path), "QWEN_MODEL": models.EMBEDDED}
                                              ).default == models.EMBEDDED_KEY    # $QWEN_MODEL still decides


def test_repeats_give_every_race_a_speedup_and_the_summary_reports_their_median(loaded):
    s = race_settings("In the beginning", max_new_tokens=16, k=2, raw=True)
    ids, _ = prepare(loaded, s)
    u = list(race(loaded, ids, s))[-1]
    ratios = u.speedups[0]
    assert 1 <= len(ratios) <= race_module.REPEATS_MAX
    assert ratios[0] == pytest.approx(u.spec.tok_s / u.plain.tok_s)          # the first is the race shown
    out = summary(loaded.key, u.plain, u.lanes, s, speedups=u.speedups)
    assert out["races"] == len(ratios) and out["speedup"] == pytest.approx(statistics.median(ratios), abs=1e-3)
    assert out["speedup_range"] == [pytest.approx(min(ratios), abs=1e-3), pytest.approx(max(ratios), abs=1e-3)]
    # every pass is timed in engine seconds, end to end, and its tokens add up to the lane's
    for run in (u.plain, u.spec):
        assert sum(n for _, _, n in run.passes) == len(run.tokens) == len(run.token_times)
        assert run.passes[-1][1] == pytest.approx(run.seconds)
        assert all(a <= b <= c for (a, b, _), (c, _, _) in zip(run.passes, run.passes[1:]))
    assert len(u.plain.passes) == len(u.plain.tokens) and len(u.spec.passes) == u.spec.rounds + 1


def test_repeats_stop_at_the_budget_of_engine_time(loaded, monkeypatch):
    s = race_settings("In the beginning", max_new_tokens=8, k=2, raw=True)
    ids, _ = prepare(loaded, s)
    first = [Run("plain", seconds=0.4), Run("speculative", seconds=0.4)]          # 0.8 s of a 3 s budget
    monkeypatch.setattr(race_module, "REPEAT_SECONDS", 3.0)
    lanes = lambda: race_module.lanes_of(loaded.model, loaded.mtp, ids, s, loaded.chat.decode,  # noqa: E731
                                         loaded.chat.stop, max_seconds=60.0, clock=time.perf_counter,
                                         rollbacks=["select"])
    again = list(race_module.repeats(lanes, first))
    spent = 0.8 + sum(r.seconds for runs in again for r in runs)
    assert 1 <= len(again) and spent - sum(r.seconds for r in again[-1]) <= 3.0     # each began under budget
    first[0].ended = "time"                                                          # a capped race: reported as run
    assert list(race_module.repeats(lanes, first)) == []


def test_a_looping_text_is_named():
    loop = [5, 6, 7, 8, 9] * 8                                                # "and the LORD, and the LORD, ..."
    assert race_module.repeating(loop) and not race_module.repeating(list(range(40)))
    plain = Run("plain", tokens=loop, seconds=1.0, passes=[(0, 1.0, len(loop))])
    spec = Run("speculative", k=2, tokens=loop, seconds=0.5, rounds=10, passes=[(0, 0.5, len(loop))])
    html = verdict_html(verdict(plain, [spec]), plain, [spec])
    assert t("loop_note", "English") in html.replace("&#x27;", "'")


def _runs(plain_s, spec_s):
    plain = Run("plain", tokens=list(range(41)), seconds=plain_s)
    spec = Run("speculative", k=2, tokens=list(range(41)), seconds=spec_s, rounds=20, hits=25)
    return plain, spec


def test_the_headline_gives_the_median_with_its_range_and_says_when_it_is_noise():
    plain, spec = _runs(1.0, 1.0)
    html = verdict_html(verdict(plain, [spec]), plain, [spec], speedups=[[0.9, 1.05, 1.2]])
    head = re.search(r'<div class="verdict-head">(.*?)</div>', html).group(1)
    assert "1.05×" in head and "median of 3 races: 0.90–1.20×" in head and "2.00 tokens per main-model pass" in head
    assert "identical text ✓" in head
    assert "on both sides of 1×" in html                                     # the range straddles 1.0
    html = verdict_html(verdict(plain, [spec]), plain, [spec], speedups=[[1.1, 1.2, 1.3]])
    assert "on both sides of 1×" not in html


def test_the_timeline_draws_a_block_per_pass_and_the_replay_its_times(loaded):
    from demo.race_html import auto_slowdown, timeline_html
    s = race_settings("In the beginning", max_new_tokens=12, k=2, raw=True)
    ids, _ = prepare(loaded, s)
    u = list(race(loaded, ids, s))[-1]
    html = timeline_html(u.plain, u.lanes, "English", [u.costs], race_id="r1")
    assert html.count("tl-pass tl-step") == len(u.plain.passes) - 1 and html.count("tl-prefill") >= 2
    assert html.count("tl-pass tl-verify") == u.spec.rounds                     # a round: draft, then verify
    assert html.count("tl-pass tl-draft") == u.spec.rounds and 'data-replay="r1"' in html
    assert auto_slowdown(0.2) == 50 and auto_slowdown(0.5) == 20 and auto_slowdown(30.0) == 1
    lane = spec_text_html(u.spec)
    times = re.search(r'data-times="([^"]*)"', lane).group(1).split(",")
    assert len(times) == lane.count('class="tok ') == sum(1 for p in u.spec.pieces if p)
    assert [float(x) for x in times] == sorted(float(x) for x in times)
    assert 'data-times="' in plain_text_html(u.plain) and plain_text_html(u.plain).count('class="rt"') == len(times)


def test_a_race_update_names_its_outputs_and_leaves_the_rest_as_they_were():
    import gradio as gr

    from demo.race_ui import RACE_OUTPUTS, outputs
    out = outputs({"status": "racing", "result": {"error": "x"}})
    assert len(out) == len(RACE_OUTPUTS) == 10 and out[0] == "racing" and out[-1] == {"error": "x"}
    assert all(isinstance(o, type(gr.skip())) for o in out[1:-1])
    with pytest.raises(KeyError, match="speculative_text"):
        outputs({"speculative_text": "a label, not a name"})
