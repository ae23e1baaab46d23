"""The compiled side's inputs get the strides a fresh tensor has (its guards check strides), copied only
where they differ: checked against torch's own contiguous layout."""
import pytest
import torch

from qwen.compiled.steps import dense

IDS = torch.arange(32)[None]                                          # (1, 32)


@pytest.mark.parametrize("x", [IDS, IDS[:, :1], IDS[:, -1:], torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)[:, :2],
                               torch.zeros(4, 3).t(), torch.zeros(1, 5, 8)[:, -1:], torch.tensor(3.0)])
def test_a_dense_input_has_a_fresh_tensors_strides_and_the_same_values(x):
    d = dense(x)
    assert d.stride() == torch.empty(x.shape).stride() and torch.equal(d, x)
    assert (d is x) == (x.stride() == torch.empty(x.shape).stride())           # no copy where none is needed
