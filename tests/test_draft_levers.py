"""tools.draft_levers' two measures, on hand-worked examples."""
import torch

from tools.draft_levers import prompt_join, rounded_rows


def test_prompt_join_counts_misses_the_prompt_holds():
    # prompt [1, 2, 3, 4], continuation [5, 1, 9, 2]; the vocabulary holds 5 only: 1 of 4 covered, and 1 and 2
    # (misses that the prompt holds) join it: 3 of 4
    assert prompt_join([1, 2, 3, 4, 5, 1, 9, 2], {5}, prompt=4, continuation=4) == (0.25, 0.75)


def test_prompt_join_takes_windows_in_turn():
    # two windows: [7 | 8] and [8 | 7]; nothing in the vocabulary, each miss held by the other window only
    assert prompt_join([7, 8, 8, 7], set(), prompt=1, continuation=1) == (0.0, 0.0)


def test_rounded_rows_round_each_row_on_its_own_scale():
    w = torch.tensor([[2.0, 1.0], [-0.5, 0.25]])
    # 8 bits: 127 steps to each row's largest magnitude; 1.0 / (2 / 127) = 63.5 rounds to 64 (to even), and so
    # does 0.25 / (0.5 / 127)
    assert torch.allclose(rounded_rows(w, 8), torch.tensor([[2.0, 128 / 127], [-0.5, 32 / 127]]))
    # 2 bits: one step each way; halves round to even (0)
    assert torch.equal(rounded_rows(w, 2), torch.tensor([[2.0, 0.0], [-0.5, 0.0]]))
