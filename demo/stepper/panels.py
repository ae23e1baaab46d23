"""The step-through view's HTML: the phase heading, the text so far, the phase's table, the proof.
Their styles are demo/static/stepper.css; the view's keys, demo/static/stepper-keys.html.

    phase_heading(run, step, "English")   -> '<div class="step-phase" data-phase="verify">② Verify …</div>'

Every piece of text from the model or the visitor is escaped here; colours come with a second mark
(underline, box, bold, ✓/✗) so they read without colour. Token classes and the ↵ of a line break are the
race's (demo.race_html: tok-draft, tok-correction, tok-bonus).
"""
from html import escape

from demo.stepper import steps
from demo.i18n import t
from demo.tokens import text_html, token_spans


def chip(run, token, cls="", title="", chars=None):
    """A token as a chip (the stepper's tables and sentences)."""
    tip = f' title="{escape(title)}"' if title else ""
    return f'<span class="step-chip {cls}"{tip}>{escape(steps.token_text(run, token, chars))}</span>'


def _pct(p):
    return f"{p * 100:.1f}%" if p >= 0.001 else f"{p * 100:.2g}%"


def phase_heading(run, step, lang):
    """The phase label (also read by the browser test through data-phase)."""
    if run is None:
        return f'<div class="step-phase" data-phase="none">{t("no_run", lang).replace("**", "")}</div>'
    r, phase = steps.where(run, step)
    rec = run.records[r]
    key = "phase_rollback" if phase == "accept" and rec["rolled_back"] else f"phase_{phase}"
    parts = [t(key, lang)]
    if phase != "prefill":
        parts.append(t("round_of", lang, r=r, n=len(run.records) - 1))
    parts.append(t("step_of", lang, s=step + 1, n=steps.n_steps(run)))
    done = steps.at_end(run, step)
    tail = f' <span class="step-done">— {escape(t("done", lang))}</span>' if done else ""
    return (f'<div class="step-phase" data-phase="{phase}" data-round="{r}" data-step="{step}" '
            f'data-done="{str(done).lower()}">'
            f'<b>{escape(parts[0])}</b> · {" · ".join(escape(p) for p in parts[1:])}{tail}</div>')


def explanation(run, step, lang):
    """The spoken explanation of the current phase (Markdown)."""
    if run is None:
        return t("no_run", lang)
    r, phase = steps.where(run, step)
    rec = run.records[r]
    if phase == "prefill":
        return t("explain_prefill", lang)
    if rec["k"] == 0:                       # k="auto" chose a plain step
        return t(f"explain_{phase}_none", lang)
    select = "_select" if rec["rollback"] == "select" else ""    # its verify keeps the DeltaNet writes aside
    if phase == "guess":
        return t("explain_guess", lang, k=rec["k"]) + draft_scored(run, lang)
    if phase == "verify":
        return t("explain_verify" + select, lang, k=rec["k"])
    if not rec["rolled_back"]:
        text = t("explain_accept" + select, lang)
    else:
        n = rec["accepted"]
        lead = t("lead_none", lang) if n == 0 else t("lead_some", lang, n=n, m=n + 1)
        text = lead + t(f"explain_rollback_{rec['rollback']}", lang) + missed_outside(run, rec, lang)
    cut = _cut_short(run, r)
    return text + (f"\n\n*{t(cut, lang)}*" if cut else "")


def draft_scored(run, lang):
    """What the head's guesses are scored over, where that is not every token (a draft vocabulary)."""
    d = run.draft
    if not d:
        return ""
    key = "draft_shipped" if d["source"].startswith("shipped for") else "draft_own" if d["source"] else "draft_by_hand"
    source = t(key, lang, what=d["source"].removeprefix("shipped for "))
    return t("explain_guess_vocab", lang, scored=d["scored"], vocab=d["vocab"], source=source, cover=d["coverage"],
             share=d["scored"] / d["vocab"])


def missed_outside(run, rec, lang):
    """A rolled-back round whose correction the draft vocabulary lacks: the head could not have guessed it."""
    fixed = [e["token"] for e in rec["emitted"] if e.get("origin") == "correction"]
    if not run.draft or not fixed or fixed[0] not in set(run.draft["outside"]):
        return ""
    return " " + t("miss_outside", lang, token=f"“{run.labels.get(fixed[0], fixed[0])}”", scored=run.draft["scored"])


def _cut_short(run, r):
    """Why a round emitted fewer tokens than it decided: a stop token, or the budget. None if it didn't."""
    rec = run.records[r]
    if rec.get("kind") != "round" or len(rec["emitted"]) == rec["accepted"] + 1:
        return None
    if rec["emitted"] and rec["emitted"][-1]["token"] in run.stop_ids:
        return "stop_mid_round"
    return "max_mid_round"


def text_so_far(run, step, lang, pending=None):
    """The output up to this step, each token marked by origin (demo.race_html's marks), the tokens of the
    current round framed, and this round's guesses shown pending (? while guessed, ✓/✗ once verified);
    `pending`: that last part's HTML when the caller draws it (a tree's guesses: demo.stepper.treeview)."""
    if run is None:
        return '<div class="race-text step-text empty"></div>'
    shown = steps.emitted_count(run, step)
    r, phase = steps.where(run, step)
    orig = [o for o, _ in steps.origins(run)]
    fresh = shown - (len(run.records[r]["emitted"]) if phase in ("accept", "prefill") else 0)
    html = token_spans(run.pieces[:fresh], orig[:fresh], lang)
    if shown > fresh:
        html += f'<span class="step-current">{token_spans(run.pieces[fresh:shown], orig[fresh:shown], lang)}</span>'
    if phase in ("guess", "verify") and pending is not None:
        html += pending
    elif phase in ("guess", "verify"):
        rec = run.records[r]
        n = rec["accepted"]
        marks = ["?" if phase == "guess" else "✓" if i < n else "✗" if i == n else "–" for i in range(rec["k"])]
        html += '<span class="step-pending">' + "".join(
            chip(run, d["token"], "step-guess", t("guess", lang)) + f"<sup>{m}</sup>"
            for d, m in zip(rec["draft"], marks)) + "</span>"
    return f'<div class="race-text step-text">{html}</div>'


def _top_list(run, top):
    return " ".join(f'{chip(run, t, "step-alt")}<small>{_pct(p)}</small>' for t, p in top[:4])


def phase_panel(run, step, lang):
    """The table of the current phase: guesses, verification, or what was emitted and what each kind of
    state did."""
    if run is None:
        return ""
    r, phase = steps.where(run, step)
    rec = run.records[r]
    if phase == "prefill":
        first = rec["emitted"][0]["token"]
        guess = rec.get("next_draft")
        rows = [f"<tr><td>{escape(t('main_choice', lang))}</td><td>{chip(run, first, 'tok-main')}</td></tr>"]
        if guess:
            rows.append(f"<tr><td>{escape(t('draft_head_guesses', lang))}</td>"
                        f"<td>{chip(run, guess['token'], 'step-guess')} {_pct(guess['prob'])}</td>"
                        f"<td class='step-alts'>{_top_list(run, guess['top'][1:])}</td></tr>")
        return table(rows)
    if phase == "guess" and not rec["draft"]:         # k="auto" chose a plain step: the figure says why
        return f"<h4>{escape(t('draft_head_guesses', lang))}</h4><p>{escape(t('decision_none', lang))}</p>"
    if phase == "guess":
        rows = [f"<tr><th>#</th><th>{escape(t('guess', lang))}</th><th>q</th>"
                f"<th>{escape(t('alternatives', lang))}</th></tr>"]
        for i, d in enumerate(rec["draft"]):
            others = [t for t in d["top"] if t[0] != d["token"]]
            rows.append(f"<tr><td>d{i + 1}</td><td>{chip(run, d['token'], 'step-guess')}</td>"
                        f"<td>{_pct(d['prob'])}</td><td class='step-alts'>{_top_list(run, others)}</td></tr>")
        return f"<h4>{escape(t('draft_head_guesses', lang))}</h4>" + table(rows) + _noise_table(run, rec, lang)
    if phase == "verify":
        return _verify_table(run, rec, lang) + _noise_table(run, rec, lang, main=True) + \
            (slots_html(run, rec, lang) if rec["rollback"] == "select" else "")
    return _accept_panel(run, r, lang)


def _verify_table(run, rec, lang):
    k, n, sampled = rec["k"], rec["accepted"], bool(run.settings.temperature)
    prev = [steps.token_at(run, rec["pos"])] + [d["token"] for d in rec["draft"]]
    rows = [f"<tr><th>{escape(t('position_after', lang))}</th><th>{escape(t('main_choice', lang))}</th>"
            f"<th>p</th><th>{escape(t('guess', lang))}</th><th>{escape(t('draft_p', lang))}</th><th></th></tr>"]
    for i, v in enumerate(rec["verify"]):
        guess = rec["draft"][i] if i < k else None
        if guess is None:
            mark, cls = ("★", "step-bonus") if n == k else ("", "step-skipped")
        elif i < n:
            mark, cls = "✓", "step-ok"
        elif i == n:
            mark, cls = "✗", "step-bad"
        else:
            mark, cls = "–", "step-skipped"
        extra = ""
        if sampled and guess is not None and guess["prob"] > 0 and "noise" not in v:      # rejection sampling
            rule = t("accept_prob", lang, a=min(1.0, v["draft_prob"] / guess["prob"]))
            extra = f"<br><small>{escape(rule)}</small>"
        guess_cells = (f"<td>{chip(run, guess['token'], 'step-guess')}</td><td>{_pct(v['draft_prob'])}{extra}</td>"
                       if guess else "<td></td><td></td>")
        rows.append(f"<tr class='{cls}'><td>{chip(run, prev[i])}</td><td>{chip(run, v['token'], 'tok-main')}</td>"
                    f"<td>{_pct(v['prob'])}</td>{guess_cells}<td class='step-mark'>{mark}</td></tr>")
    return table(rows)


def slots_html(run, rec, lang, picked=False):
    """select's k+1 slots: the memory write kept for each token of the verify pass (tok, d1..dk); at the accept
    phase the writes up to the last accepted token are marked as applied, the later ones as dropped."""
    tokens = [steps.token_at(run, rec["pos"])] + [d["token"] for d in rec["draft"]]
    n = rec["accepted"]
    cells = []
    for i, token in enumerate(tokens):
        cls = "" if not picked else (" picked" if i <= n else " rejected")
        mark = f" ✓ {escape(t('slot_selected', lang))}" if picked and i <= n else (" ✗" if picked else "")
        cells.append(f'<span class="step-slot{cls}" data-slot="{i}">{i + 1}: '
                     f'{escape(t("slot_after", lang, token=steps.token_text(run, token)))}{mark}</span>')
    return f'<div class="step-slots" title="{escape(t("slots", lang))}"><small>{escape(t("slots", lang))}</small>' \
        f'{"".join(cells)}</div>'


def _kb(n):
    return f"{n / 1024:.1f} KB" if n < 2**20 else f"{n / 2**20:.1f} MB"


def _accept_panel(run, r, lang):
    rec = run.records[r]
    st, n, k = rec["states"], rec["accepted"], rec["k"]
    chips = " ".join(chip(run, e["token"], f"tok tok-{e['origin']}", t(f"short_origin_{e['origin']}", lang)) +
                     f"<small> {escape(t('short_origin_' + e['origin'], lang))}</small>" for e in rec["emitted"])
    kv = (st["before"]["kv"] or [0])[0], (st["after_verify"]["kv"] or [0])[0], (st["after"]["kv"] or [0])[0]
    n_attn = len(st["after"]["kv"])
    n_delta = sum(1 for la in st["after"]["layers"] if la["kind"] == "deltanet")
    kv_text = t("kv_cut", lang, a=kv[0], b=kv[1], c=kv[2], d=kv[1] - kv[2]) if kv[2] < kv[1] else \
        t("kv_grow", lang, a=kv[0], b=kv[2])
    if k == 0:                                      # k="auto" chose a plain step
        mem = t("memory_plain", lang)
    elif not rec["rolled_back"] and rec["rollback"] != "select":
        mem = t("memory_kept", lang)
    elif rec["rollback"] == "recompute":
        seconds = rec["seconds"].get("restore", 0) + rec["seconds"].get("rerun", 0)
        mem = t("memory_snapshot", lang, size=_kb(rec["snapshot_bytes"])) + "; " + \
            t("memory_restored", lang, n=n + 1, ms=seconds * 1000)
    elif rec["rollback"] == "select":
        mem = t("memory_selected", lang, n=n + 1, m=k + 1)
    else:
        mem = t("memory_dirty", lang)
    resting = st["before"]["head_kv"] == st["after"]["head_kv"]       # k="auto": the head sat this step out
    head = t("head_rests" if resting else "head_cut", lang, n=n + 1) + \
        f" ({st['before']['head_kv']} → {st['after']['head_kv']})"
    rows = [f"<tr><td>{escape(t('emitted', lang))}</td><td>{chips}</td></tr>",
            f"<tr><td>{escape(t('state_kv', lang, n=n_attn))}</td><td>{escape(kv_text)}</td></tr>",
            f"<tr><td>{escape(t('state_memory', lang, n=n_delta))}</td><td>{escape(mem)}"
            f"{slots_html(run, rec, lang, picked=True) if rec['rollback'] == 'select' else ''}</td></tr>",
            f"<tr><td>{escape(t('state_head', lang))}</td><td>{escape(head)}</td></tr>"]
    return table(rows)


def _ranked(run, noise):
    """Leading candidates as chips with log prob + G = sum, the pick (first) starred."""
    return " ".join(f"{chip(run, tok)}<small>{'★ ' if i == 0 else ''}{lp:+.2f} {g:+.2f} = {lp + g:.2f}</small>"
                    for i, (tok, lp, g) in enumerate(noise[:3]))


def _noise_table(run, rec, lang, main=False):
    """Sampling with shared noise: per position, the draft's ranking by log q + G and (verify, main=True)
    the main model's by log p + G, so one sees why they agreed or not. "" otherwise."""
    drafts = rec.get("draft") or []
    if not any("noise" in d for d in drafts):
        return ""
    head = f"<tr><th>#</th><th>{escape(t('noise_draft', lang))}</th>" + \
        (f"<th>{escape(t('noise_main', lang))}</th>" if main else "") + "</tr>"
    rows = [head]
    for i, d in enumerate(drafts):
        cells = f"<td class='step-alts'>{_ranked(run, d['noise'])}</td>"
        if main:
            v = rec["verify"][i]
            cells += f"<td class='step-alts'>{_ranked(run, v.get('noise', []))}</td>"
        rows.append(f"<tr><td>d{i + 1}</td>{cells}</tr>")
    return f"<p><small>{escape(t('noise_title', lang))}</small></p>" + table(rows)


def table(rows):
    """A table in its own sideways-scrolling box (stepper.css): on a narrow screen it scrolls rather than
    break a word or a token."""
    return f'<div class="step-scroll"><table class="step-table">{"".join(rows)}</table></div>'


def proof_html(proof, lang, rollback):
    """Plain decoding, speculative with the restore, and without it, side by side; the first token where
    the skipped run departs from plain decoding is marked."""
    def column(name, title, verdict, ok):
        diff = proof.first_diff if name == "skipped" and proof.first_diff is not None else None
        spans = []
        for i, piece in enumerate(proof.pieces[name]):
            cls = "" if diff is None or i < diff else ("step-diff" if i == diff else "step-after-diff")
            spans.append(f'<span class="{cls}">{text_html(piece)}</span>')
        badge = f'<div class="step-verdict {"ok" if ok else "bad"}">{escape(verdict)}</div>' if verdict else ""
        return (f'<div class="step-proof-col"><h4>{escape(title)}</h4>{badge}'
                f'<div class="race-text step-text">{"".join(spans)}</div></div>')
    same = t("proof_same", lang)
    cols = [column("plain", t("proof_plain", lang), "", True),
            column("restored", t("proof_restored", lang, rollback=rollback),
                   same if proof.restored_ok else t("proof_differs", lang, i=(proof.restored_diff or 0) + 1),
                   proof.restored_ok)]
    if proof.first_diff is None:
        cols.append(column("skipped", t("proof_skipped", lang), same, True))
        note = t("proof_never", lang, n=min(len(proof.plain), len(proof.skipped)))
    else:
        cols.append(column("skipped", t("proof_skipped", lang), t("proof_differs", lang, i=proof.first_diff + 1),
                           False))
        note = t("proof_verdict", lang, i=proof.first_diff + 1)
    return f'<div class="step-proof">{"".join(cols)}</div><p class="step-proof-note">{escape(note)}</p>'

