"""SNR / magnitude pruning: exact masks on constructed posteriors, exact predictions at the extremes."""

import pytest
import torch
from pyro.infer.autoguide import AutoDelta, AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.diagnostics.pruning import PrunedSource, format_pruning_table, num_pruned, prune, pruning_table
from pyro_bnn.guides import BayesByBackprop, FlatMeanField, NodeNoiseMixture, init_to_network
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior
from pyro_bnn.priors.selection import name_matches


def _bnn(select=None, sizes=(2, 4, 3)):
    torch.manual_seed(0)
    layers = [nn.Linear(sizes[0], sizes[1]), nn.Tanh(), nn.Linear(sizes[1], sizes[2])]
    return BNN(nn.Sequential(*layers), NormalPrior(0.0, 1.0, select=select), Categorical(60))


def _data(n=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2, generator=g), torch.arange(n) % 3


def _flat_guide(bnn, locs=None, scales=None):
    """A FlatMeanField whose per-site mu and sigma are set to the given tensors (others keep their start)."""
    guide = FlatMeanField(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.1)
    guide(*_data())
    with torch.no_grad():
        loc_views, log_scale_views = guide.split(guide.loc), guide.split(guide.log_scale)
        for name, value in (locs or {}).items():
            loc_views[name].copy_(value)
        for name, value in (scales or {}).items():
            log_scale_views[name].copy_(value.log())
    return guide


GUIDES = {
    "flat": lambda bnn: FlatMeanField(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.1),
    "autonormal": lambda bnn: AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.1),
    "bbb": BayesByBackprop,
}


@pytest.mark.parametrize("kind", GUIDES)
@pytest.mark.parametrize("by", ["snr", "magnitude"])
def test_pruning_nothing_reproduces_the_guide_predictions_exactly(kind, by):
    bnn = _bnn()
    guide = GUIDES[kind](bnn)
    x, y = _data()
    guide(x, y)
    source = prune(guide, bnn, 0.0, by=by)
    assert source.num_pruned == 0 and source.num_weights == 8 + 12
    torch.manual_seed(5)
    expected = predict(bnn, guide, (x, y), num_samples=7)
    torch.manual_seed(5)
    pruned = predict(bnn, source, (x, y), num_samples=7)
    assert torch.equal(pruned.probs, expected.probs)
    assert torch.equal(pruned.log_likelihood, expected.log_likelihood)


@pytest.mark.parametrize("kind", GUIDES)
def test_pruning_every_output_weight_leaves_the_bias_as_logits(kind):
    bnn = _bnn(select=name_matches("2.*"))  # only the output layer is random: 2.weight and 2.bias
    guide = GUIDES[kind](bnn)
    x, y = _data()
    guide(x, y)
    source = prune(guide, bnn, 1.0)
    assert source.num_pruned == source.num_weights == 12
    source.prepare(bnn, x)
    params = source.draw_globals(bnn, 0, 5, x)
    assert torch.equal(params["2.weight"], torch.zeros(5, 1, 3, 4))
    assert params["2.bias"].abs().min() > 0  # biases are never pruned
    logits = bnn.apply_parameters(x, params, sample_shape=(5,))  # (5, N, 3)
    assert torch.equal(logits, params["2.bias"].expand_as(logits))


def test_ranking_is_pooled_across_layers_and_skips_biases():
    bnn = _bnn()
    snr_first = torch.arange(1.0, 9.0).reshape(4, 2) / 100  # layer 0: SNRs 0.01 .. 0.08, all below layer 2's
    snr_last = torch.arange(1.0, 13.0).reshape(3, 4)  # layer 2: SNRs 1 .. 12
    guide = _flat_guide(
        bnn,
        locs={
            "0.weight": snr_first,
            "2.weight": snr_last.flip(0),
            "0.bias": torch.zeros(4),  # SNR 0, the lowest of all, but a bias
            "2.bias": torch.zeros(3),
        },
        scales={"0.weight": torch.ones(4, 2), "2.weight": torch.ones(3, 4)},
    )
    source = prune(guide, bnn, 0.5)  # 10 of 20 weights: all 8 of layer 0, then SNRs 1 and 2 of layer 2
    assert source.num_pruned == 10
    assert torch.equal(source.masks["0.weight"], torch.ones(4, 2, dtype=torch.bool))
    expected_last = torch.zeros(3, 4, dtype=torch.bool)
    expected_last[2, 0] = expected_last[2, 1] = True  # flip(0): SNRs 1 and 2 sit in the last row
    assert torch.equal(source.masks["2.weight"], expected_last)
    assert set(source.masks) == {"0.weight", "2.weight"}
    assert source.threshold == pytest.approx(2.0)


def test_snr_and_magnitude_rank_differently():
    bnn = _bnn(select=name_matches("0.weight"))  # 8 random weights
    locs = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    scales = torch.tensor([[0.1, 0.1], [0.1, 0.1], [100.0, 100.0], [100.0, 100.0]])  # big mu, but noise bigger
    guide = _flat_guide(bnn, {"0.weight": locs}, {"0.weight": scales})
    top_rows = torch.tensor([[True] * 2] * 2 + [[False] * 2] * 2)
    assert torch.equal(prune(guide, bnn, 0.5, by="magnitude").masks["0.weight"], top_rows)
    assert torch.equal(prune(guide, bnn, 0.5, by="snr").masks["0.weight"], ~top_rows)


def test_ties_go_in_pooled_order_and_the_count_rounds_half_up():
    bnn = _bnn(select=name_matches("*.weight"))
    guide = _flat_guide(bnn, {"0.weight": torch.ones(4, 2), "2.weight": torch.ones(3, 4)})  # 20 equal scores
    for fraction, k in [(0.0, 0), (0.025, 1), (0.3, 6), (0.5, 10), (1.0, 20)]:
        assert num_pruned(fraction, 20) == k
        masks = prune(guide, bnn, fraction, by="magnitude").masks
        pooled = torch.cat([masks["0.weight"].flatten(), masks["2.weight"].flatten()])
        assert torch.equal(pooled, torch.arange(20) < k)


def test_pruned_weights_are_zero_in_every_draw_and_the_rest_keep_the_guide_draws():
    bnn = _bnn()
    guide = GUIDES["flat"](bnn)
    x, y = _data()
    guide(x, y)
    source = prune(guide, bnn, 0.75)
    torch.manual_seed(3)
    pruned = source.draw_globals(bnn, 0, 4, x)
    torch.manual_seed(3)
    full = guide.draw(4)
    for name, value in pruned.items():
        mask = source.masks.get(name, torch.zeros(value.shape[2:], dtype=torch.bool))
        assert torch.equal(value, torch.where(mask, torch.zeros(()), full[name]))


def test_refuses_guides_without_a_normal_posterior_in_one_line():
    bnn = _bnn()
    delta = AutoDelta(bnn)
    delta(*_data())
    with pytest.raises(ValueError, match="sigma = 0") as info:
        prune(delta, bnn, 0.5)
    assert "\n" not in str(info.value)
    assert prune(delta, bnn, 0.5, by="magnitude").num_pruned == 10  # a point estimate ranks by |mu|
    with pytest.raises(ValueError, match="mean-field Normal guide"):
        prune(NodeNoiseMixture(bnn, num_components=2), bnn, 0.5)
    with pytest.raises(ValueError, match="fraction"):
        prune(delta, bnn, 1.5)
    with pytest.raises(ValueError, match="by must be"):
        prune(delta, bnn, 0.5, by="random")


def test_pruning_table_rows_and_markdown():
    bnn = _bnn()
    guide = GUIDES["bbb"](bnn)
    x, y = _data()
    guide(x, y)
    state = torch.get_rng_state()
    rows = pruning_table(bnn, guide, (x, y), fractions=(0.0, 0.5, 1.0), num_samples=6)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's random stream is left where it was
    assert [row["num_pruned"] for row in rows] == [0, 10, 20]
    # Same seed in every cell: with nothing pruned the rankings agree, and so do they with everything pruned.
    for row in (rows[0], rows[2]):
        assert row["error_snr"] == row["error_magnitude"] and row["nll_snr"] == row["nll_magnitude"]
    torch.manual_seed(0)
    unpruned = predict(bnn, guide, (x, y), num_samples=6).metrics()
    assert rows[0]["error_snr"] == pytest.approx(1 - unpruned["accuracy"])
    assert rows[0]["nll_snr"] == pytest.approx(unpruned["nll"])
    table = format_pruning_table(rows)
    lines = table.splitlines()
    assert len(lines) == 2 + 3
    assert "Test error (signal-to-noise)" in lines[0] and "Test error (magnitude)" in lines[0]
    assert lines[3].startswith("| 50 % | 10 / 20 |")


def test_pruned_source_checks_its_masks():
    bnn = _bnn()
    guide = GUIDES["flat"](bnn)
    x, y = _data()
    guide(x, y)
    with pytest.raises(ValueError, match="shape"):
        predict(bnn, PrunedSource(guide, {"0.weight": torch.zeros(2, 4, dtype=torch.bool)}), x, num_samples=2)


def test_plot_pruning_draws_one_line_per_ranking(tmp_path):
    from pyro_bnn.plots.weight_stats import plot_pruning

    rows = [
        {"fraction": f, "num_pruned": 0, "num_weights": 1, "error_snr": e, "error_magnitude": 2 * e}
        for f, e in [(0.5, 0.1), (0.0, 0.05), (0.95, 0.3)]
    ]
    figure = plot_pruning(rows)
    (ax,) = figure.get_axes()
    lines = ax.get_lines()
    assert len(lines) == 2
    assert list(lines[0].get_xdata()) == [0.0, 50.0, 95.0]
    assert list(lines[1].get_ydata()) == pytest.approx([10.0, 20.0, 60.0])
    figure.savefig(tmp_path / "pruning.png")
