"""Per-layer posterior statistics and the callback that records them during training."""

import json

import pyro
import pytest
import torch
from pyro.infer.autoguide import AutoDelta
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.diagnostics.weight_stats import (
    LayerStats,
    WeightStatsRecorder,
    statistics_from_dict,
    statistics_to_dict,
    weight_statistics,
)
from pyro_bnn.guides import BayesByBackprop, FlatMeanField, init_to_network
from pyro_bnn.infer import Checkpoint, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior
from pyro_bnn.priors.selection import name_matches


def _blobs(n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    centres = torch.tensor([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]])
    return centres[y] + 0.8 * torch.randn(n, 2, generator=g), y


def _classifier(select=None, n_train=60):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3))
    return BNN(net, NormalPrior(0.0, 1.0, select=select), Categorical(n_train))


def _trainer(bnn, callbacks=()):
    return Trainer(
        bnn,
        lambda m: FlatMeanField(m, init_loc_fn=init_to_network(m), init_scale=0.05),
        optim=pyro.optim.Adam({"lr": 0.05}),
        seed=0,
        progress=False,
        callbacks=list(callbacks),
    )


def _loader():
    x, y = _blobs()
    return BatchLoader(x, y, 20, shuffle=True, seed=4)


def test_statistics_cover_every_weight_with_hand_checked_summaries():
    bnn = _classifier()
    guide = FlatMeanField(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.1)
    guide(*_blobs())
    with torch.no_grad():  # layer 2's weights: |mu| = 0, 1, ..., 23 over sigma = 2, so SNR = 0, 0.5, ..., 11.5
        guide.split(guide.loc)["2.weight"].copy_(torch.arange(24.0).reshape(3, 8) * (-1) ** torch.arange(8))
        guide.split(guide.log_scale)["2.weight"].fill_(torch.tensor(2.0).log())
    stats = weight_statistics(guide, bnn, bins=7)
    assert list(stats) == ["0", "2"]
    for layer, (n_weights, n_biases) in {"0": (16, 8), "2": (24, 3)}.items():
        for part, count in (("weights", n_weights), ("biases", n_biases)):
            summary = getattr(stats[layer], part)
            assert summary.count == count
            for histogram in (summary.mu, summary.sigma, summary.snr_db):
                assert len(histogram.counts) == 7 and len(histogram.edges) == 8
                assert sum(histogram.counts) == count
    last = stats["2"].weights
    assert last.mean_sigma == pytest.approx(2.0)
    assert last.median_snr == pytest.approx(5.5)  # lower middle of 0 .. 11.5 in steps of 0.5
    assert last.fraction_snr_below_1 == pytest.approx(2 / 24)  # SNR 0 and 0.5
    assert last.snr_db.counts[0] >= 1  # SNR 0 (minus infinity dB) lands in the lowest bin
    assert last.mu.edges[0] == pytest.approx(-23.0) and last.mu.edges[-1] == pytest.approx(22.0)
    # Plain data round trip, through JSON.
    assert statistics_from_dict(json.loads(json.dumps(statistics_to_dict(stats)))) == stats


def test_weights_only_model_has_no_bias_entry_and_point_estimates_are_refused():
    bnn = _classifier(select=name_matches("*.weight"))
    guide = BayesByBackprop(bnn)
    guide(*_blobs())
    stats = weight_statistics(guide, bnn)
    assert all(isinstance(s, LayerStats) and s.biases is None for s in stats.values())
    assert sum(sum(s.weights.mu.counts) for s in stats.values()) == bnn.num_random_parameters()
    delta = AutoDelta(bnn)
    delta(*_blobs())
    with pytest.raises(ValueError, match="sigma = 0"):
        weight_statistics(delta, bnn)


def test_recorder_keeps_one_entry_per_epoch_without_changing_training(tmp_path):
    recorder = WeightStatsRecorder(tmp_path / "weight_stats.json", bins=10)
    history = _trainer(_classifier(), [recorder]).fit(_loader(), 3)
    assert [entry["epoch"] for entry in recorder.history] == [1, 2, 3]
    assert json.loads((tmp_path / "weight_stats.json").read_text()) == recorder.history
    assert recorder.history[0] != recorder.history[-1]  # the posterior moved
    plain = _trainer(_classifier()).fit(_loader(), 3)
    assert [r["loss"] for r in plain] == [r["loss"] for r in history]  # recording draws no random numbers

    copy = WeightStatsRecorder()
    copy.load_state_dict(json.loads(json.dumps(recorder.state_dict())))
    assert copy.history == recorder.history
    assert copy.statistics() == recorder.statistics()
    # the checkpoint holds the history as one string (torch.save pickled each number of nested lists one by one);
    # a checkpoint written before, with the lists, still loads
    assert list(recorder.state_dict()) == ["history_json"] and isinstance(recorder.state_dict()["history_json"], str)
    older = WeightStatsRecorder()
    older.load_state_dict({"history": json.loads(json.dumps(recorder.history))})
    assert older.history == recorder.history


def test_a_resumed_run_continues_the_history(tmp_path):
    first = WeightStatsRecorder()
    _trainer(_classifier(), [first, Checkpoint(tmp_path / "run.pt")]).fit(_loader(), 2)
    resumed = WeightStatsRecorder()
    _trainer(_classifier(), [resumed, Checkpoint(tmp_path / "run.pt")]).fit(
        _loader(), 3, resume_from=tmp_path / "run.pt"
    )
    assert [entry["epoch"] for entry in resumed.history] == [1, 2, 3]
    assert resumed.history[:2] == first.history


def test_bad_arguments():
    with pytest.raises(ValueError, match="bins"):
        WeightStatsRecorder(bins=0)
    bnn = _classifier()
    guide = BayesByBackprop(bnn)
    with pytest.raises(ValueError, match="has run"):
        weight_statistics(guide, bnn)  # never run


def test_plot_weight_statistics_draws_first_and_last_epoch(tmp_path):
    from pyro_bnn.plots.weight_stats import plot_weight_statistics

    recorder = WeightStatsRecorder(bins=8)
    _trainer(_classifier(), [recorder]).fit(_loader(), 2)
    figure = plot_weight_statistics(recorder.history, title="weights")
    axes = figure.get_axes()
    assert len(axes) == 2 * 3  # two layers, mu / sigma / SNR
    assert [text.get_text() for text in axes[0].get_legend().get_texts()] == ["epoch 1", "epoch 2"]
    figure.savefig(tmp_path / "weights.png")
    assert len(plot_weight_statistics(recorder.statistics(), part="biases").get_axes()) == 6
    with pytest.raises(ValueError, match="at least one"):
        plot_weight_statistics([])


def test_a_run_interrupted_between_checkpoints_resumes_to_the_same_files(tmp_path, interrupt_after):
    """Checkpoints every 3rd epoch, files written every 2nd and 3rd: killed after epoch 4 (the files then run ahead
    of the checkpoint of epoch 3) and resumed with the same callback objects, the run ends with the numbers and the
    files of an uninterrupted one: weight_stats.json byte for byte, history.json but for the times."""
    from pyro_bnn.infer import HistoryLogger, load_checkpoint

    class Killed(Exception):
        pass

    def callbacks(folder, *extra):
        return [
            WeightStatsRecorder(folder / "weight_stats.json", every=2),
            Checkpoint(folder / "checkpoint.pt", every=3),
            HistoryLogger(folder / "history.json", every=3),
            *extra,
        ]

    untimed = lambda history: [{k: v for k, v in r.items() if k != "time_s"} for r in history]  # noqa: E731
    straight = _trainer(_classifier(), callbacks(tmp_path / "straight"))
    straight.fit(_loader(), 7)
    run = tmp_path / "run"
    first = callbacks(run, interrupt_after(4, Killed))
    with pytest.raises(Killed):
        _trainer(_classifier(), first).fit(_loader(), 7)
    assert load_checkpoint(run / "checkpoint.pt")["epoch"] == 3
    assert [r["epoch"] for r in json.loads((run / "history.json").read_text())] == [1, 2, 3]
    assert [e["epoch"] for e in json.loads((run / "weight_stats.json").read_text())] == [1, 2, 4]
    resumed = _trainer(_classifier(), first[:3])
    history = resumed.fit(_loader(), 7, resume_from=run / "checkpoint.pt")
    assert untimed(history) == untimed(straight.history)
    assert (run / "weight_stats.json").read_bytes() == (tmp_path / "straight" / "weight_stats.json").read_bytes()
    assert [e["epoch"] for e in json.loads((run / "weight_stats.json").read_text())] == [1, 2, 4, 6, 7]
    text = (run / "history.json").read_text()
    assert text == json.dumps(history, indent=2)
    assert untimed(json.loads(text)) == untimed(json.loads((tmp_path / "straight" / "history.json").read_text()))
    final, expected = load_checkpoint(run / "checkpoint.pt"), load_checkpoint(tmp_path / "straight" / "checkpoint.pt")
    assert final["epoch"] == 7 and all(torch.equal(final["guide"][k], v) for k, v in expected["guide"].items())
    assert json.loads(final["history"]) == history
