"""The examples table's labels come from measurement (tools.example_labels writes
demo/examples_measured.json, demo.prompts reads it), and each page's default prompt is
the one that file measured: a label says "easy to guess" only where the head kept at least EASY of its drafts."""
import pytest

from demo.models import ModelStore
from demo.prompts import EASY, EXAMPLES, default_example, example_samples, measured
from tools import example_labels


@pytest.fixture(scope="module")
def loaded():
    return ModelStore().get()


@pytest.mark.parametrize("lang", ["English", "中文"])
def test_each_default_prompt_keeps_the_share_of_drafts_its_label_says(loaded, lang):
    _, prompt, raw, max_new = default_example(lang)
    kept, tokens = example_labels.acceptance(loaded, prompt, raw, max_new)
    assert measured()[prompt] == pytest.approx(kept, abs=1e-4)
    assert tokens == max_new                     # a race that runs its full length, in either language


def test_every_example_is_measured_and_labelled_easy_only_from_the_threshold():
    kept = measured()
    assert set(kept) == {prompt for _, prompt, _, _ in EXAMPLES}
    for lang, words in (("English", "easy to guess"), ("中文", "好猜（")):
        for (label, _), (_, prompt, _, _) in zip(example_samples(lang), EXAMPLES):
            assert (words in label) == (kept[prompt] >= EASY), (label, kept[prompt])
            assert f"{kept[prompt]:.0%}" in label


def test_the_defaults_are_alike_to_guess_in_both_languages():
    kept = measured()
    en, zh = kept[default_example("English")[1]], kept[default_example("中文")[1]]
    assert abs(en - zh) <= 0.05
