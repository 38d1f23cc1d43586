"""Mends of a review of the non-finite slice edges, the float64 export and predictive_distance's class_index: a
plateau that runs into a NaN edge is open, NumPy draws keep their own precision, any integer is a class index."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from pyro_bnn.diagnostics.alignment import predictive_distance
from pyro_bnn.diagnostics.arviz_export import draws_to_inference_data, posterior_dataset
from pyro_bnn.diagnostics.plateaus import find_plateau
from pyro_bnn.diagnostics.slices import likelihood_slice


def _flat_above_one(nan_above: float):
    """log-likelihood 0 for outputs >= 1 (a plateau), -100 (out - 1)^2 below, NaN above ``nan_above``."""

    def log_likelihood(output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = output[:, 0]
        value = torch.where(out >= 1, torch.zeros_like(out), -100 * (out - 1) ** 2)
        return torch.where(out > nan_above, torch.full_like(out, math.nan), value)

    return log_likelihood


@pytest.mark.parametrize("nan_above", [math.inf, 1.5])
def test_a_plateau_reaching_a_capped_or_non_finite_edge_is_open(nan_above):
    # the slice of w in out = w * 1 + 0 starts at w0 = 1, the plateau's lower end; upward the likelihood never
    # falls: capped without NaN, stopped by NaN above 1.5; either way the plateau is not seen to end there
    net = nn.Sequential(nn.Linear(1, 1))
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[0].bias.zero_()
    values = {k: v.detach().clone() for k, v in net.named_parameters()}
    slice_ = likelihood_slice(net, _flat_above_one(nan_above), torch.ones(3, 1), torch.ones(3), values,
                              "0.weight", (0, 0))  # fmt: skip
    plateau = find_plateau(slice_)
    assert (slice_.capped[1], slice_.nonfinite[1]) == ((True, False) if nan_above == math.inf else (False, True))
    assert plateau is not None and plateau.open_upper and not plateau.open_lower
    assert plateau.open


def test_numpy_draws_keep_their_precision_in_the_export():
    draws = np.array([[[1.0], [1.0 + 1e-12], [1e-50], [1e300]]])  # (chain, draw, 1), float64
    for given in (draws, torch.from_numpy(draws)):
        exported = posterior_dataset(draws_to_inference_data({"a": given}))["a"].values.ravel().tolist()
        assert exported == [1.0, 1.0 + 1e-12, 1e-50, 1e300]


def test_any_integer_is_a_class_index_of_w1():
    probs_a = torch.softmax(torch.randn(5, 4, 3, generator=torch.Generator().manual_seed(0)), -1)
    probs_b = torch.softmax(torch.randn(5, 4, 3, generator=torch.Generator().manual_seed(1)), -1)
    expected = predictive_distance(probs_a, probs_b, kind="w1", class_index=1)
    for index in (torch.tensor(1), np.int64(1)):
        torch.testing.assert_close(predictive_distance(probs_a, probs_b, kind="w1", class_index=index), expected)
    with pytest.raises(ValueError, match=r"got tensor\(3\)$"):
        predictive_distance(probs_a, probs_b, kind="w1", class_index=torch.tensor(3))
