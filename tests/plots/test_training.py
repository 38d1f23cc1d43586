"""plot_training_curves: one panel per key, one colour per run in every panel, a legend naming every run."""

import pytest
from matplotlib.colors import to_hex

from pyro_bnn.plots import plot_training_curves

# Run "a" records no loss, so a per-panel colour cycle gave b the first colour in the loss panel and a the first in
# the accuracy panel, and the legend (first panel only) did not name a.
HISTORIES = {
    "a": [{"epoch": 1, "val_accuracy": 0.5}, {"epoch": 2, "val_accuracy": 0.6}],
    "b": [{"epoch": 1, "loss": 9.0, "val_accuracy": 0.7}, {"epoch": 2, "loss": 8.0, "val_accuracy": 0.8}],
}


def _lines(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_a_run_keeps_its_colour_in_every_panel_and_the_legend_names_every_run():
    figure = plot_training_curves(HISTORIES, keys=("loss", "val_accuracy"))
    loss_ax, accuracy_ax = figure.axes
    assert list(_lines(loss_ax)) == ["b"]
    assert _lines(loss_ax)["b"].get_xydata().tolist() == [[1, 9.0], [2, 8.0]]
    assert _lines(accuracy_ax)["a"].get_xydata().tolist() == [[1, 0.5], [2, 0.6]]
    colour = {"a": to_hex("C0"), "b": to_hex("C1")}  # by the run's place in the mapping
    assert to_hex(_lines(loss_ax)["b"].get_color()) == colour["b"]
    assert {label: to_hex(line.get_color()) for label, line in _lines(accuracy_ax).items()} == colour
    legend = loss_ax.get_legend()
    assert [text.get_text() for text in legend.get_texts()] == ["a", "b"]
    assert [to_hex(handle.get_color()) for handle in legend.legend_handles] == [colour["a"], colour["b"]]


def test_one_str_is_one_key():
    figure = plot_training_curves(HISTORIES, keys="val_accuracy")  # drew 12 panels, one per character
    (ax,) = figure.axes
    assert ax.get_ylabel() == "validation accuracy"
    assert _lines(ax)["b"].get_xydata().tolist() == [[1, 0.7], [2, 0.8]]


def test_the_kl_term_is_labelled_as_the_weighted_term_the_trainer_records():
    history = [{"epoch": 1, "kl_term": 3.0}]
    (ax,) = plot_training_curves({"a": history}, keys=("kl_term",)).axes
    assert ax.get_ylabel() == "β·KL term (weighted)"


@pytest.mark.parametrize(
    ("histories", "keys", "message"),
    [
        (HISTORIES, ("val_acc",), r"no history records key 'val_acc'; they record \['epoch', 'loss', 'val_accuracy'\]"),
        (HISTORIES, (), "keys must name at least one panel to draw; got none"),
        (HISTORIES, ("loss", 3), "keys must be a str or a sequence of str; it holds 3"),
        (HISTORIES["a"], ("val_accuracy",), r"histories must be a mapping \{run label: trainer history\}, got list"),
    ],
)
def test_what_cannot_be_drawn_is_refused_in_one_line(histories, keys, message):
    with pytest.raises(ValueError, match=message) as error:
        plot_training_curves(histories, keys=keys)
    assert "\n" not in str(error.value)
