"""Plot functions refuse input they cannot draw in one line naming it, before matplotlib fails deep inside (an
IndexError from an empty axis, a KeyError from a missing site, a NumPy reduction over nothing)."""

import math

import pytest
import torch

from pyro_bnn.evaluation import calibration, least_confident
from pyro_bnn.plots import (
    plot_gallery,
    plot_marginals,
    plot_ood_histograms,
    plot_regression,
    plot_reliability,
    plot_training_curves,
    plot_vi_vs_nuts,
)


def _gallery_with_class_names(names):
    probs = torch.softmax(torch.randn(5, 3, generator=torch.Generator().manual_seed(0)), -1)
    return plot_gallery(torch.rand(5, 1, 4, 4), least_confident(probs, torch.full((5,), 2), 2), class_names=names)


CASES = [
    (lambda: plot_marginals({"w": torch.randn(2, 50, 3)}, sites=["v"]), r"samples hold no site 'v'; they hold \['w'\]"),
    (lambda: plot_regression(torch.zeros(0), torch.zeros(0), torch.zeros(0)), "x_test holds no point"),
    (
        lambda: plot_regression(torch.linspace(0, 1, 5), torch.zeros(5), torch.full((5,), math.nan)),
        "std must be non-negative numbers; found nan",
    ),
    (
        lambda: plot_ood_histograms({"entropy": torch.rand(5)}, {"entropy": torch.zeros(0)}, names=("entropy",)),
        r"out_scores\['entropy'\] must hold at least one score, all finite; got 0 values",
    ),
    (lambda: _gallery_with_class_names(["a"]), r"class_names has 1 names; the entries need 3 \(classes 0..2\)"),
    (
        lambda: plot_vi_vs_nuts(torch.rand(5, 12, 2), torch.rand(5, 12, 2), class_index=2),
        r"class_index must lie in \[-2, 2\) for 2 classes, got 2",
    ),
    (lambda: plot_training_curves({"a": [{"val_accuracy": 0.5}]}), "record 0 of history 'a' has no 'epoch'"),
    (
        lambda: plot_reliability({"relu": calibration(torch.full((4, 2), 0.5), torch.zeros(4, dtype=torch.long))}),
        "result must be a CalibrationResult .* got dict; for several, use plot_reliability_grid",
    ),
]


@pytest.mark.parametrize(("call", "message"), CASES)
def test_input_a_plot_cannot_draw_is_refused_in_one_line(call, message):
    with pytest.raises(ValueError, match=message) as error:
        call()
    assert "\n" not in str(error.value)


def test_the_gallery_draws_with_a_name_for_every_class():
    figure = _gallery_with_class_names(["a", "b", "c"])
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert titles and all(title.startswith("c / ") for title in titles)  # every label is class 2
