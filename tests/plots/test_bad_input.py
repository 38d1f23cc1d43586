"""Plot functions refuse input they cannot draw in one line naming it, before matplotlib fails deep inside (an
IndexError from an empty axis, a KeyError from a missing site, a NumPy reduction over nothing)."""

import math

import numpy as np
import pytest
import torch

from pyro_bnn.evaluation import calibration, least_confident
from pyro_bnn.plots import (
    plot_gallery,
    plot_marginals,
    plot_ood_histograms,
    plot_predictive_map,
    plot_pruning,
    plot_regression,
    plot_reliability,
    plot_training_curves,
    plot_vi_vs_nuts,
)
from pyro_bnn.predict.maps import PredictiveMap


def _gallery_with_class_names(names):
    probs = torch.softmax(torch.randn(5, 3, generator=torch.Generator().manual_seed(0)), -1)
    return plot_gallery(torch.rand(5, 1, 4, 4), least_confident(probs, torch.full((5,), 2), 2), class_names=names)


def _pmap():
    """A 4 x 5 map (rows y, columns x) with known values."""
    probability = torch.linspace(0, 1, 20).reshape(4, 5)
    return PredictiveMap(
        x=torch.linspace(-1, 1, 5),
        y=torch.linspace(-1, 1, 4),
        probability=probability,
        sd=0.1 * probability,
        mutual_information=0.01 * probability,
        positive_class=1,
        num_samples=3,
    )


CASES = [
    (lambda: plot_marginals({"w": torch.randn(2, 50, 3)}, sites=["v"]), r"samples hold no site 'v'; they hold \['w'\]"),
    (lambda: plot_regression(torch.zeros(0), torch.zeros(0), torch.zeros(0)), "x_test holds no point"),
    (
        lambda: plot_regression(torch.linspace(0, 1, 5), torch.zeros(5), torch.full((5,), math.nan)),
        "std must be non-negative finite numbers; found nan",
    ),
    # matplotlib's "Axis limits cannot be NaN or Inf" named no argument
    (
        lambda: plot_regression([0, math.nan, 2], [0, 1, 1], [1, 1, 1]),
        "x_test must be finite numbers; found nan at index 1",
    ),
    (
        lambda: plot_regression([0, 1, 2], [0, math.inf, 1], [1, 1, 1]),
        "mean must be finite numbers; found inf at index 1",
    ),
    (
        lambda: plot_regression([0, 1, 2], [0, 1, 1], [1, math.inf, 1]),
        "std must be non-negative finite numbers; found inf",
    ),
    # KeyError 'fraction'
    (
        lambda: plot_pruning([{"error_snr": 0.1}]),
        r"row 0 has no 'fraction'; pruning_table's rows have \['fraction', 'error_snr'\]",
    ),
    (
        lambda: plot_pruning([{"fraction": 0.0, "error_snr": 0.1}, {"fraction": 0.5}]),
        r"row 1 has no 'error_snr'",
    ),
    # IndexError: index 2 is out of bounds for dimension 2 with size 2
    (
        lambda: plot_marginals(
            {"w": torch.randn(2, 10, 3)}, comparison={"w": torch.randn(2, 10, 2)}, indices=[("w", (2,))]
        ),
        r"comparison\['w'\] has site shape \(2,\), samples\['w'\] \(3,\); the same site must have the same shape",
    ),
    (lambda: plot_marginals([torch.randn(2, 10, 3)]), r"samples must be a mapping .* got list"),
    # a str of names was read one character a name: "unknown map quantity ['s', 'd']", "in_scores has no score 'e'"
    (lambda: plot_predictive_map(_pmap(), quantities="entropy"), "unknown map quantity 'entropy'; expected some of"),
    (lambda: plot_predictive_map(_pmap(), quantities=()), "quantities must name at least one panel to draw; got none"),
    (lambda: plot_ood_histograms({"e": torch.rand(5)}, {"e": torch.rand(5)}, names=()), "names must name at least one"),
    (lambda: plot_marginals({"ab": torch.randn(2, 5, 3)}, sites="abc"), r"samples hold no site 'abc'"),
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


DRAWS = "expected draws (chain, draw, *site_shape) with at least one chain and one draw"
GRID = "grid_shape must be (H, W) with H, W ints >= 2 (a filled contour map), got "


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # IndexError from np.percentile over no draws, and from indexing a 1-D tensor as (chain, draw)
        (lambda: plot_marginals({"w": torch.randn(1, 0, 2)}), f"samples['w'] has shape (1, 0, 2); {DRAWS}"),
        (lambda: plot_marginals({"w": torch.randn(0, 5, 2)}), f"samples['w'] has shape (0, 5, 2); {DRAWS}"),
        (lambda: plot_marginals({"w": np.zeros(5)}), f"samples['w'] has shape (5,); {DRAWS}"),
        (
            lambda: plot_marginals({"w": torch.randn(2, 5, 2)}, comparison={"w": torch.randn(1, 0, 2)}),
            f"comparison['w'] has shape (1, 0, 2); {DRAWS}",
        ),
        # TypeError from contourf: "Input z must be at least a (2, 2) shaped array, but has shape (1, 1)"
        (
            lambda: plot_vi_vs_nuts(
                torch.rand(3, 1, 2), torch.rand(3, 1, 2), inputs=torch.zeros(1, 2), grid_shape=(1, 1)
            ),
            GRID + "(1, 1)",
        ),
        (
            lambda: plot_vi_vs_nuts(
                torch.rand(3, 3, 2), torch.rand(3, 3, 2), inputs=torch.zeros(3, 2), grid_shape=(1, 3)
            ),
            GRID + "(1, 3)",
        ),
        # "not enough values to unpack (expected 2, got 1)"
        (
            lambda: plot_vi_vs_nuts(
                torch.rand(3, 4, 2), torch.rand(3, 4, 2), inputs=torch.zeros(4, 2), grid_shape=(4,)
            ),
            GRID + "(4,)",
        ),
        # contourf's "lower_level and upper_level cannot be NaN" from a mean over no samples
        (
            lambda: plot_vi_vs_nuts(
                torch.rand(0, 4, 2), torch.rand(0, 4, 2), inputs=torch.zeros(4, 2), grid_shape=(2, 2)
            ),
            "probs_nuts must hold at least one sample (S, N, C), got shape (0, 4, 2)",
        ),
    ],
)
def test_degenerate_posterior_shape_input_is_refused_in_exactly_one_line(call, message):
    with pytest.raises(ValueError) as error:
        call()
    assert str(error.value) == message


def test_a_2_x_2_grid_is_the_least_map_and_a_grid_shape_may_be_any_pair_of_ints():
    points = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    for grid_shape in ((2, 2), [2, 2], np.array([2, 2]), torch.Size([2, 2])):
        figure = plot_vi_vs_nuts(torch.rand(3, 4, 2), torch.rand(3, 4, 2), inputs=points, grid_shape=grid_shape)
        assert len([ax for ax in figure.axes if ax.get_title()]) == 6  # mean and sd rows of three panels


def test_the_gallery_draws_with_a_name_for_every_class():
    figure = _gallery_with_class_names(["a", "b", "c"])
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert titles and all(title.startswith("c / ") for title in titles)  # every label is class 2


def test_one_str_names_one_panel():
    """``quantities``, ``names`` and ``sites`` read one str as one name, as ``plot_training_curves``' ``keys`` does."""
    figure = plot_predictive_map(_pmap(), quantities="sd")
    (ax, colorbar) = figure.axes  # one panel, with its colour bar
    assert colorbar.get_label() == "<colorbar>" and colorbar.get_ylabel() == "sd of p(class 1)"
    scores = {"entropy": torch.rand(5, generator=torch.Generator().manual_seed(0))}
    (ax,) = plot_ood_histograms(scores, scores, names="entropy").axes
    assert ax.get_xlabel() == "predictive entropy (nats)"
    figure = plot_marginals({"ab": torch.randn(2, 5, 3)}, sites="ab")
    assert [ax.get_title().split()[0] for ax in figure.axes if ax.get_visible()] == ["ab[0]", "ab[1]", "ab[2]"]


def test_arrays_are_drawn_as_tensors_are():
    """numpy images, points and labels failed with "'numpy.ndarray' object has no attribute 'dim'"."""
    images = np.arange(5 * 16, dtype=np.float32).reshape(5, 1, 4, 4)
    probs = torch.softmax(torch.randn(5, 3, generator=torch.Generator().manual_seed(0)), -1)
    entries = least_confident(probs, torch.full((5,), 2), 2)
    from_array = plot_gallery(images, entries)
    from_tensor = plot_gallery(torch.from_numpy(images), entries)
    for ax_array, ax_tensor in zip(from_array.axes, from_tensor.axes, strict=True):
        assert ax_array.get_title() == ax_tensor.get_title()
        if ax_tensor.images:
            np.testing.assert_array_equal(ax_array.images[0].get_array(), ax_tensor.images[0].get_array())
    points, labels = np.array([[0.0, 0.0], [0.5, -0.5]]), np.array([1, 0])
    figure = plot_predictive_map(_pmap(), points, labels, quantities=("probability",))
    ax = figure.axes[0]
    np.testing.assert_array_equal(ax.collections[-1].get_offsets(), points)
    with pytest.raises(ValueError, match=r"labels must be \(2,\), one per point, got shape \(1,\)"):
        plot_predictive_map(_pmap(), points, np.array([1]))
