"""``plot_regression``: the mean line, the ± num_sd band, training dots, the true function and shaded gaps."""

import numpy as np
import pytest
import torch
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from pyro_bnn.data import cubic_regression
from pyro_bnn.plots import plot_regression, save_figure, training_gaps

X = torch.linspace(-4, 4, 81).unsqueeze(1)  # (M, 1)
MEAN = X**3
STD = torch.full_like(X, 0.5)


def _line(ax, label):
    return next(line for line in ax.get_lines() if line.get_label() == label)


def test_draws_mean_band_data_and_truth():
    data = cubic_regression(step=0.1)
    figure = plot_regression(X, MEAN, STD, data.x_train, data.y_train, y_true=X**3, title="cubic")
    assert isinstance(figure, Figure)
    ax = figure.axes[0]
    assert ax.get_title() == "cubic"
    np.testing.assert_allclose(_line(ax, "predictive mean").get_ydata(), MEAN[:, 0].numpy())
    np.testing.assert_allclose(_line(ax, "true function").get_ydata(), (X**3)[:, 0].numpy(), rtol=1e-6)
    band = next(c for c in ax.collections if isinstance(c, PolyCollection))
    vertices = band.get_paths()[0].vertices
    # the band spans mean - 2 sd .. mean + 2 sd: at x = 0 that is -1 .. 1
    at_zero = vertices[np.isclose(vertices[:, 0], 0.0, atol=1e-6)][:, 1]
    np.testing.assert_allclose(sorted(set(np.round(at_zero, 6))), [-1.0, 1.0])
    dots = next(c for c in ax.collections if isinstance(c, PathCollection))
    assert len(dots.get_offsets()) == 40
    gap = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_label() == "no training data"]
    assert len(gap) == 1
    left, right = gap[0].get_x(), gap[0].get_x() + gap[0].get_width()
    assert left == pytest.approx(-1.1) and right == pytest.approx(1.0)


def test_one_d_inputs_unsorted_and_without_data():
    order = torch.randperm(81, generator=torch.Generator().manual_seed(0))
    x, mean, std = X[order, 0], MEAN[order, 0], STD[order, 0]  # (M,), shuffled
    ax = plot_regression(x.numpy(), mean.tolist(), std, num_sd=1.0).axes[0]
    line = _line(ax, "predictive mean")
    np.testing.assert_allclose(line.get_xdata(), X[:, 0].numpy())
    assert not ax.patches and not [c for c in ax.collections if isinstance(c, PathCollection)]
    assert any(text.get_text() == "mean ± 1 sd" for text in ax.get_legend().get_texts())


def test_saves_a_png(tmp_path):
    path = save_figure(plot_regression(X, MEAN, STD), tmp_path / "predictive.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_training_gaps():
    assert training_gaps(np.r_[np.arange(0, 1, 0.1), np.arange(3, 4, 0.1)]) == [(pytest.approx(0.9), 3.0)]
    assert training_gaps(np.arange(10.0)) == [] and training_gaps(np.array([0.0, 5.0])) == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"x_test": torch.zeros(81, 2)}, r"x_test must have shape \(M,\) or \(M, 1\)"),
        ({"std": STD[:10]}, "std must hold 81 values"),
        ({"std": -STD}, "std must be non-negative"),
        ({"x_train": X}, "x_train and y_train go together"),
    ],
)
def test_bad_inputs(kwargs, match):
    arguments = {"x_test": X, "mean": MEAN, "std": STD, **kwargs}
    with pytest.raises(ValueError, match=match):
        plot_regression(**arguments)
