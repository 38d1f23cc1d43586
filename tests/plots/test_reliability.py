import math

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pyro_bnn.evaluation import calibration
from pyro_bnn.plots import plot_reliability, plot_reliability_grid

# Ten bins, three filled (see tests/evaluation/test_calibration.py for the arithmetic):
#   bin 4: acc 0.5, conf 0.475    bin 8: acc 0.5, conf 0.875    bin 9: acc 1.0, conf 0.975
PROBS = torch.tensor(
    [
        [0.5, 0.3, 0.2],
        [0.45, 0.35, 0.2],
        [0.9, 0.05, 0.05],
        [0.95, 0.03, 0.02],
        [0.1, 0.85, 0.05],
        [1.0, 0.0, 0.0],
    ]
)
LABELS = torch.tensor([0, 1, 0, 0, 2, 0])


@pytest.fixture
def result():
    return calibration(PROBS, LABELS, n_bins=10)


def _bar_containers(ax):
    """The diagram's (accuracy bars, gap bars), told apart by their legend labels."""
    containers = {container.get_label(): container for container in ax.containers}
    accuracy = next(c for label, c in containers.items() if "ECE" in label)
    return accuracy, containers["gap to confidence"]


def _check_diagram(ax, histogram_ax, result):
    filled = (result.bin_counts > 0).numpy()
    accuracy_bars, gap_bars = _bar_containers(ax)
    # One bar per non-empty bin, as high as the bin's accuracy, centred on the bin.
    heights = [bar.get_height() for bar in accuracy_bars]
    np.testing.assert_allclose(heights, result.bin_accuracy.numpy()[filled])
    centres = [bar.get_x() + bar.get_width() / 2 for bar in accuracy_bars]
    edges = result.bin_edges.numpy()
    np.testing.assert_allclose(centres, ((edges[:-1] + edges[1:]) / 2)[filled])
    # Gap bars run from the accuracy to the mean confidence.
    np.testing.assert_allclose([bar.get_y() for bar in gap_bars], result.bin_accuracy.numpy()[filled])
    tops = [bar.get_y() + bar.get_height() for bar in gap_bars]
    np.testing.assert_allclose(tops, result.bin_confidence.numpy()[filled])
    # The histogram shows every bin's count.
    counts = [bar.get_height() for bar in histogram_ax.containers[0]]
    np.testing.assert_array_equal(counts, result.bin_counts.numpy())
    assert histogram_ax.get_xlabel() == "confidence"


def test_plot_reliability_draws_accuracy_gap_and_histogram(result):
    figure = plot_reliability(result, title="ReLU", label="ReLU")
    assert isinstance(figure, Figure)
    ax, histogram_ax = figure.axes
    _check_diagram(ax, histogram_ax, result)
    assert ax.get_title() == "ReLU"
    legend_texts = [text.get_text() for text in ax.get_legend().get_texts()]
    # ECE = 0.425 / 3 = 0.1417, over 10 bins
    assert f"ReLU, ECE (10 bins) {0.425 / 3:.3f}" in legend_texts
    # The diagonal of perfect calibration.
    (diagonal,) = ax.get_lines()
    np.testing.assert_array_equal(diagonal.get_xydata(), [[0, 0], [1, 1]])


def test_plot_reliability_into_given_axes_returns_its_figure(result):
    figure = Figure()
    ax = figure.add_subplot()
    assert plot_reliability(result, ax=ax) is figure
    assert figure.axes[0] is ax and len(figure.axes) == 2
    accuracy_bars, _ = _bar_containers(ax)
    assert accuracy_bars.get_label().startswith("accuracy, ECE (10 bins) ")


def test_plot_reliability_into_a_subfigure_returns_the_root_figure(result):
    figure = Figure()
    (left, _right) = figure.subfigures(1, 2)
    assert plot_reliability(result, ax=left.add_subplot()) is figure


def test_plot_reliability_with_samples_layout_and_fifteen_bins():
    probs = torch.softmax(torch.randn(4, 200, 3), dim=-1)
    labels = torch.randint(0, 3, (200,))
    result = calibration(probs, labels)
    figure = plot_reliability(result)
    _check_diagram(*figure.axes, result)


def test_plot_reliability_grid_has_one_titled_panel_per_result(result):
    other = calibration(PROBS, LABELS, n_bins=15)
    figure = plot_reliability_grid({"ReLU": result, "Leaky ReLU": other}, title="Fashion-MNIST")
    assert isinstance(figure, Figure)
    # Each panel is a diagram plus its histogram: the diagrams are created first, the histograms after.
    relu_ax, leaky_ax, relu_histogram, leaky_histogram = figure.axes
    assert [relu_ax.get_title(), leaky_ax.get_title()] == ["ReLU", "Leaky ReLU"]
    assert figure.get_suptitle() == "Fashion-MNIST"
    _check_diagram(relu_ax, relu_histogram, result)
    _check_diagram(leaky_ax, leaky_histogram, other)
    # ECE of the 15-bin result is 0.325; each panel's legend names its own bin count, so two ECEs of one model
    # binned differently (a 15-bin table next to a 10-bin figure) read as what they are.
    assert any(c.get_label() == "accuracy, ECE (15 bins) 0.325" for c in leaky_ax.containers)
    assert any(c.get_label() == f"accuracy, ECE (10 bins) {0.425 / 3:.3f}" for c in relu_ax.containers)
    assert not math.isnan(other.ece)


def test_plot_reliability_grid_rejects_an_empty_mapping():
    with pytest.raises(ValueError, match="got an empty mapping"):
        plot_reliability_grid({})


def test_plot_reliability_grid_refuses_what_is_not_binned_in_one_line():
    with pytest.raises(ValueError, match=r"results\['m'\] must be a CalibrationResult .* got Tensor") as error:
        plot_reliability_grid({"m": PROBS})
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=r"results must be a mapping \{panel title: CalibrationResult\}, got list"):
        plot_reliability_grid([calibration(PROBS, LABELS, n_bins=10)])


def test_the_legend_covers_no_bar():
    """A low-confidence bin at accuracy 1 (bin 0.3-0.4: two points of confidence 0.35, both right) had its bar under
    the legend in the upper left; the legend now sits above accuracy 1, where no bar reaches."""
    probs = torch.tensor([[0.35, 0.33, 0.32], [0.35, 0.33, 0.32], [0.9, 0.05, 0.05], [0.9, 0.05, 0.05]])
    labels = torch.tensor([0, 0, 0, 1])
    result = calibration(probs, labels, n_bins=10)
    assert result.bin_accuracy[3] == 1.0 and result.bin_counts[3] == 2
    for figure in (
        plot_reliability(result, label="a long model name"),
        plot_reliability_grid({"a": result, "b": result}),
    ):
        renderer = FigureCanvasAgg(figure).get_renderer()
        figure.draw(renderer)
        for ax in figure.axes[: len(figure.axes) // 2]:  # the diagrams; the histograms come after
            legend = ax.get_legend().get_window_extent(renderer)
            bars = [bar.get_window_extent(renderer) for container in ax.containers for bar in container]
            assert bars and not any(legend.overlaps(bar) for bar in bars)
            # Every tick label is an accuracy in [0, 1]; the strip above holds only the legend.
            assert list(ax.get_yticks()) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
