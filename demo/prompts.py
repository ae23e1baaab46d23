"""What the race and the stepper share about a prompt: the examples offered, the prompt turned into ids
for a model (its chat template or raw, cut to fit), the sampling settings, the rollbacks to choose from.

    ids, notices = prepare(loaded, settings)      # (1, T) ids and [Notice]; settings.max_new_tokens may shrink
    generate(..., **sampling(settings))           # temperature 0: greedy; else shared noise from the seed
    default_example("中文")                        # the prompt a Chinese page opens with (a poem)
"""
import functools
import json
import os

import gradio as gr
import torch

from demo.i18n import LANGS, is_zh, t
from demo.choices import ROLLBACKS
from demo.validate import Notice, fit_prompt

# The embedded model continues text of its corpus kinds well (KJV, Python's reST docs, classical Chinese
# poems) and chats badly, so raw continuations lead and the chat prompts follow. How well its head guesses
# each one is measured, not written here: the tool tools/example_labels.py (python -m tools.example_labels) writes
# demo/examples_measured.json (EXAMPLES_FILE), and the examples table labels a prompt "easy to guess" only from that.
# kind (an i18n key), prompt, raw completion, max new tokens
EXAMPLES = [
    ("kind_bible", "1 In the beginning God created the heaven and the earth.\n2 And the earth was without form, "
                   "and void;", True, 120),
    ("kind_docs", ".. class:: Counter([iterable-or-mapping])\n\n   ", True, 120),
    ("kind_poem", "《过故人庄》\n作者：孟浩然\n\n故人具鸡", True, 120),
    ("kind_poem", "《登高》\n作者：杜甫\n\n风急天高猿啸哀，", True, 120),
    ("kind_bible", "The LORD is my shepherd;", True, 120),
    ("kind_docs", "The :mod:`os` module provides", True, 120),
    ("kind_chat", "用一句话介绍一下 Transformer。", False, 120),
    ("kind_chat", "Explain the :func:`os.path.join` function.", False, 120),
]
# The prompt a page opens with, per language (the same raw switch and length, so a language switch swaps
# only the prompt). The Chinese one was chosen for a race that gains about as much as the English one's
# (python -m tools.race_bench --predict; docs/benchmarks.md): among the poems the embedded model knows,
# Meng Haoran's keeps as many drafts as the KJV verse (60% against 61%, 2.20 tokens a round each) and runs
# its full 120 tokens (a search over the 408 poems of tang300 and song100 and a few cuts of each).
DEFAULT_EXAMPLE = EXAMPLES[0]
ZH_EXAMPLE = EXAMPLES[2]
EXAMPLES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples_measured.json")
EASY = 0.60                     # share of drafts kept from which an example is labelled "easy to guess"


@functools.lru_cache(maxsize=1)
def measured():
    """{prompt: share of drafts kept} as tools/example_labels.py last wrote it; {} when the file is missing or
    unreadable."""
    try:
        with open(EXAMPLES_FILE, encoding="utf-8") as f:
            return {row["prompt"]: float(row["kept"]) for row in json.load(f)["examples"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def default_example(lang):
    """(kind, prompt, raw, max new tokens) that a page in `lang` opens with."""
    return ZH_EXAMPLE if is_zh(lang) else DEFAULT_EXAMPLE


def default_prompt_for(prompt, lang):
    """The prompt after switching the page to `lang`: that language's default when `prompt` is another
    language's untouched default, else `prompt` itself (what a visitor typed stays)."""
    defaults = {default_example(other)[1] for other in LANGS}
    return default_example(lang)[1] if prompt in defaults else prompt


def example_samples(lang):
    """The examples table's rows in `lang`: [kind and how well the head guesses it (measured), prompt shown on
    one line]."""
    return [[example_label(kind, prompt, lang), prompt.replace("\n", " ↵ ").replace("-", "\u2011")]   # no break at "-"
            for kind, prompt, _, _ in EXAMPLES]


def example_label(kind, prompt, lang):
    """"Bible (KJV) · raw · easy to guess (61%)": the kind, then the share of drafts the embedded model's head
    kept on this prompt as tools/example_labels.py measured it ("easy" from EASY up), or the kind alone."""
    kept = measured().get(prompt)
    if kept is None:
        return t(kind, lang)
    return t(kind, lang) + " · " + t("guess_easy" if kept >= EASY else "guess_hard", lang, kept=kept)


def example_values(index):
    """(prompt, raw, max new tokens) of example `index` (the table's row), or None when out of range."""
    try:
        _, prompt, raw, max_new = EXAMPLES[int(index)]
    except (TypeError, ValueError, IndexError):
        return None
    return prompt, raw, max_new


def pick_example(index):
    """A click on the examples table (either tab's): (prompt, raw, max new tokens), or nothing changed."""
    values = example_values(index)
    return values if values else gr.skip()


def rollback_choices(lang):
    """The engine's rollbacks a visitor may choose (the stepper's choices too)."""
    return [(t(f"rollback_{rollback}", lang), rollback) for rollback in ROLLBACKS]


def encode_prompt(chat, text, raw, thinking):
    """ids (1, T): the model's chat template around `text`, or `text` as it is (raw completion, or a
    model without a template). Thinking is switched off unless asked for."""
    if raw or not chat.has_template:
        return chat.encode(text)
    return chat.encode_chat([{"role": "user", "content": text}],
                            enable_thinking=bool(thinking) if chat.supports_thinking else None)


def prompt_budget(context, max_new_tokens, k, cap):
    """Most prompt tokens that leave room for the answer (+ k drafts in flight), and at most `cap`."""
    return max(1, min(context - max_new_tokens - k - 1, cap))


def prepare(loaded, settings, max_prompt_tokens=2048):
    """The prompt's ids for this model, cut to fit. -> (ids (1, T), [Notice])
    Also shrinks settings.max_new_tokens to half the context for models with a small one."""
    chat, notices = loaded.chat, []
    settings.max_new_tokens = min(settings.max_new_tokens, loaded.context // 2)
    if not settings.raw and not chat.has_template:
        notices.append(Notice("no_template"))
    budget = prompt_budget(loaded.context, settings.max_new_tokens, settings.k, max_prompt_tokens)
    text, more = fit_prompt(settings.prompt,
                            count=lambda s: encode_prompt(chat, s, settings.raw, settings.thinking).shape[1],
                            text_ids=chat.ids_of, ids_text=chat.decode, budget=budget)
    return encode_prompt(chat, text, settings.raw, settings.thinking), notices + more


def sampling(settings):
    """Engine keyword arguments for sampling (settings: .temperature, .seed, .rule; a race's or the stepper's).
    Shared noise (the default) samples from the seed alone, so plain and speculative runs write the same
    text; "rejection" gives every run a fresh generator with the same seed, so runs of the same settings
    still sample alike (the stepper's too)."""
    if not settings.temperature:
        return {"temperature": 0}
    if settings.rule == "rejection":
        return {"temperature": settings.temperature, "generator": torch.Generator().manual_seed(settings.seed)}
    return {"temperature": settings.temperature, "seed": settings.seed}
