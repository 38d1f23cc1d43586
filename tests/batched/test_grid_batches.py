"""Batched runs in the grid: compatible specs are grouped, each run of a batch gets an ordinary run folder, and a
run that cannot share a batch trains alone."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from pyro_bnn.reproduce import LocalExecutor, Status, run_grid
from pyro_bnn.reproduce.executors import check_batch_runs, group_specs
from pyro_bnn.reproduce.planned import RunSpec
from pyro_bnn.runs.batched_runs import auto_batch_runs, batch_key, run_memory_bytes, train_runs_batched
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.evaluate import evaluate_run

BASE = RunConfig(
    dataset="moons",
    model="tanh-small",
    activation="tanh",
    guide="flat:0.05",
    epochs=4,
    batch_size=64,
    num_samples=8,
    num_val_samples=4,
    device="cpu",
    lr=0.02,
)


def _spec(**changes) -> RunSpec:
    config = dataclasses.replace(BASE, **changes)
    return RunSpec(config, label="-".join(f"{k}{v}" for k, v in changes.items()) or "base")


def test_batch_keys_group_what_may_share_a_batch():
    base = batch_key(BASE)
    assert base is not None
    for changes in (
        {"seed": 3},
        {"prior": "laplace:0,0.3"},
        {"lr": 0.1},
        {"kl_anneal": "linear:2"},
        {"guide": "flat:0.1"},
        {"prior": "mixture:0.5,1,0.01"},
    ):
        assert batch_key(dataclasses.replace(BASE, **changes)) == base, changes
    assert batch_key(dataclasses.replace(BASE, activation="leaky:-0.5")) == batch_key(
        dataclasses.replace(BASE, activation="leaky:0.2")
    )
    for changes in (
        {"batch_size": 32},
        {"epochs": 5},
        {"model": "mlp:4"},
        {"activation": "relu"},
        {"guide": "bbb"},
        {"num_particles": 2},
    ):
        assert batch_key(dataclasses.replace(BASE, **changes)) != base, changes
    # Bayes by Backprop's runs (two particles, its scale mixture or a Normal prior, either KL weighting) share one.
    bbb = dataclasses.replace(BASE, guide="bbb", num_particles=2)
    assert batch_key(bbb) is not None
    assert batch_key(dataclasses.replace(bbb, prior="mixture:0.25,1,0.0025", kl_weighting="blundell")) == batch_key(bbb)
    # The point estimates batch (MAP members of an ensemble, the deterministic network, MC dropout at one
    # probability), each with its own kind.
    point = {guide: batch_key(dataclasses.replace(BASE, guide=guide)) for guide in ("map", "mle", "mc-dropout:0.1")}
    assert None not in point.values() and len({base, *point.values()}) == 4
    assert batch_key(dataclasses.replace(BASE, guide="map", seed=4, prior="laplace:0,1")) == point["map"]
    assert batch_key(dataclasses.replace(BASE, guide="mc-dropout:0.1", seed=4)) == point["mc-dropout:0.1"]
    assert batch_key(dataclasses.replace(BASE, guide="mc-dropout:0.2")) not in point.values()
    # SGD batches apart from Adam; node-noise runs batch with their mixture guide, one K and one S a batch.
    assert batch_key(dataclasses.replace(BASE, optimizer="sgd")) not in (None, base)
    noise = dataclasses.replace(BASE, node_noise=True, guide="mixture:2", optimizer="sgd", prior="normal:1,0.1")
    assert batch_key(noise) is not None
    assert batch_key(dataclasses.replace(noise, seed=3, prior="normal:1,0.3", lr_variational=0.4)) == batch_key(noise)
    for other in ({"guide": "mixture:4"}, {"samples_per_example": 3}, {"bias_noise": True}, {"optimizer": "adam"}):
        assert batch_key(dataclasses.replace(noise, **other)) not in (None, batch_key(noise)), other
    # The batched mixture computes the mixture-mean objective, its KL closed-form against Normal priors only.
    for alone in ({"prior": "laplace:1,0.1"}, {"elbo": "trace"}):
        assert batch_key(dataclasses.replace(noise, **alone)) is None, alone
    for alone in (
        {"prior": "hierarchical:normal,halfcauchy,1"},
        {"guide": "autonormal:0.01"},
        {"guide": "flat:0.05,loc=map"},
        {"elbo": "fast-local"},
        {"node_noise": True, "guide": "flat:0.05"},  # node noise batches with its mixture guide only
    ):
        assert batch_key(dataclasses.replace(BASE, **alone)) is None, alone


def test_a_batch_of_runs_naming_no_activation_trains_the_models_own(tmp_path):
    """tanh-small left to its default batches with runs naming tanh and trains tanh (it resolved to ReLU)."""
    own = dataclasses.replace(BASE, activation=None, epochs=1)
    assert batch_key(own) == batch_key(dataclasses.replace(own, activation="tanh"))
    assert batch_key(own) != batch_key(dataclasses.replace(own, activation="relu"))
    results = train_runs_batched(
        [own, dataclasses.replace(own, seed=1)], [tmp_path / "a", tmp_path / "b"], progress=False
    )
    assert all(not isinstance(r, BaseException) for r in results), results
    for folder in ("a", "b"):
        assert json.loads((tmp_path / folder / "config.json").read_text())["activation"] == "tanh"


def test_specs_are_grouped_in_chunks_of_compatible_runs():
    specs = [_spec(seed=s) for s in range(5)] + [_spec(prior="hierarchical:normal,halfcauchy,1", elbo="trace")]
    specs.insert(2, _spec(seed=9, batch_size=32))
    groups = group_specs(specs, 2)
    assert [[s.config.seed for s in g] for g in groups] == [[0, 1], [9], [2, 3], [4], [0]]
    assert group_specs(specs, 1) == [[s] for s in specs]
    assert check_batch_runs("auto") == "auto" and check_batch_runs("4") == 4
    with pytest.raises(ValueError, match="batch_runs must be an int >= 1 or 'auto', got 0"):
        check_batch_runs(0)


def test_auto_batch_size_follows_the_memory_estimate(monkeypatch):
    import pyro_bnn.runs.batched_runs as module

    per_run = run_memory_bytes(BASE)
    monkeypatch.setattr(module, "free_memory_bytes", lambda device: int(per_run * 10 / module.AUTO_MEMORY_SHARE))
    assert auto_batch_runs(BASE) == 10
    monkeypatch.setattr(module, "free_memory_bytes", lambda device: 1)
    assert auto_batch_runs(BASE) == 1
    monkeypatch.setattr(module, "free_memory_bytes", lambda device: 10**15)
    assert auto_batch_runs(BASE) == module.AUTO_MAX_RUNS
    # On a CPU a network as large as the 3FC trains alone: batching does not pay there.
    big = dataclasses.replace(BASE, dataset="fashion-mnist", model="3fc", activation="relu")
    assert auto_batch_runs(big) == 1


def test_a_batched_grid_writes_ordinary_run_folders(tmp_path):
    """Four compatible runs train as one batch, a hierarchical one alone; every folder holds what a single run's
    does, `evaluate` re-scores a batched run from its checkpoint, and a rerun trains nothing."""
    specs = [_spec(seed=s, prior=p) for s, p in ((0, "normal:0,1"), (1, "laplace:0,1"), (2, "flat"), (3, "normal:0,3"))]
    specs.append(_spec(prior="hierarchical:normal,halfcauchy,1", elbo="trace"))
    out = tmp_path / "grid"
    records = run_grid(specs, out, LocalExecutor(batch_runs=8), progress=False)
    assert [r.status for r in records] == [Status.DONE] * 5, [r.reason for r in records]
    assert [r.metrics.get("batched_runs", 1) for r in records] == [4, 4, 4, 4, 1]
    for record in records:
        folder = out / "runs" / record.spec.run_id
        assert {"config.json", "checkpoint.pt", "history.json", "metrics.json", "result.json"} <= {
            p.name for p in folder.iterdir()
        }
        assert not list(folder.glob("*.png"))  # a grid's runs draw no figures: its report draws its own
        assert len(record.history) == 4
    batched = out / "runs" / records[1].spec.run_id
    metrics = json.loads((batched / "metrics.json").read_text())
    rescored = evaluate_run(batched, num_samples=8)
    assert (batched / "reliability.png").exists()  # evaluate draws the run's reliability diagram
    assert abs(rescored["accuracy"] - metrics["accuracy"]) < 0.2
    first = records  # the rerun below trains nothing: the same records come back
    again = run_grid(specs, out, LocalExecutor(batch_runs=8), progress=False)
    assert [r.metrics for r in again] == [r.metrics for r in first]


def test_train_runs_batched_refuses_runs_that_cannot_share_a_batch(tmp_path):
    configs = [BASE, dataclasses.replace(BASE, batch_size=32)]
    with pytest.raises(ValueError, match="cannot share a batch"):
        train_runs_batched(configs, [tmp_path / "a", tmp_path / "b"])
    assert not (tmp_path / "a").exists()


def test_a_batch_refused_once_built_falls_back_to_single_runs(tmp_path, monkeypatch, capsys):
    """A refusal that only the built runs reveal (here: made up) makes every run train alone, with its record, and
    says so in one line on stderr with the reason (it was silent)."""
    import pyro_bnn.reproduce.records as records

    def refuse(*args, **kwargs):
        raise ValueError("refused after building")

    monkeypatch.setattr(records, "train_runs_batched", refuse)
    specs = [_spec(seed=s) for s in range(2)]
    done = run_grid(specs, tmp_path / "grid", LocalExecutor(batch_runs=2), progress=False)
    assert [r.status for r in done] == [Status.DONE] * 2
    assert all("batched_runs" not in r.metrics for r in done)
    assert torch.isfinite(torch.tensor([r.metrics["accuracy"] for r in done])).all()
    notes = [line for line in capsys.readouterr().err.splitlines() if "alone" in line]
    assert notes == [
        f"training the 2 runs of a batch alone ({specs[0].run_id}, ...): ValueError: refused after building"
    ]


def test_a_grid_of_point_estimates_batches_and_scores_as_single_runs(tmp_path):
    """MAP runs with their own priors and the maximum-likelihood network (a deep ensemble's members, a grid's
    deterministic baseline) train in batches whose run folders score exactly as the same runs trained alone: a point
    estimate draws no noise, so nothing but float rounding may differ."""
    specs = [_spec(guide="map", seed=s, prior=p) for s, p in ((0, "normal:0,1"), (1, "laplace:0,0.3"), (2, "flat"))]
    specs += [_spec(guide="mle", seed=s) for s in (0, 1)]
    batched = run_grid(specs, tmp_path / "batched", LocalExecutor(batch_runs=8), progress=False)
    single = run_grid(specs, tmp_path / "single", LocalExecutor(batch_runs=1), progress=False)
    assert [r.status for r in batched + single] == [Status.DONE] * 10, [r.reason for r in batched + single]
    assert [r.metrics.get("batched_runs", 1) for r in batched] == [3, 3, 3, 2, 2]
    for a, b in zip(batched, single, strict=True):
        assert "batched_runs" not in b.metrics
        for key in ("accuracy", "nll", "ece"):
            assert a.metrics[key] == pytest.approx(b.metrics[key], rel=1e-4, abs=1e-6), (a.spec.run_id, key)
        assert [h["loss"] for h in a.history] == pytest.approx([h["loss"] for h in b.history], rel=1e-5)


def test_a_grid_of_node_noise_and_mc_dropout_runs_trains_in_batches(tmp_path):
    """Node-noise runs (the mixture guide, SGD, two K) and MC dropout runs train in batches of their kind, each folder
    an ordinary run's that ``evaluate`` re-scores from its checkpoint, and they learn what the same runs learn alone
    (mean accuracy within 0.05)."""
    noise = {"node_noise": True, "optimizer": "sgd", "prior": "normal:1,0.1", "lr": 0.05, "epochs": 15}
    specs = [_spec(guide="mixture:2", seed=s, **noise) for s in (0, 1, 2)]
    specs += [_spec(guide="mixture:3", seed=s, num_samples=6, num_val_samples=3, **noise) for s in (0, 1)]
    specs += [_spec(guide="mc-dropout:0.2", seed=s, epochs=15) for s in (0, 1)]
    batched = run_grid(specs, tmp_path / "batched", LocalExecutor(batch_runs=8), progress=False)
    single = run_grid(specs, tmp_path / "single", LocalExecutor(batch_runs=1), progress=False)
    assert [r.status for r in batched + single] == [Status.DONE] * 14, [r.reason for r in batched + single]
    assert [r.metrics.get("batched_runs", 1) for r in batched] == [3, 3, 3, 2, 2, 2, 2]
    folder = tmp_path / "batched" / "runs" / batched[0].spec.run_id
    rescored = evaluate_run(folder, num_samples=8)
    assert abs(rescored["accuracy"] - batched[0].metrics["accuracy"]) < 0.1
    for group in (slice(0, 5), slice(5, 7)):
        ours = sum(r.metrics["accuracy"] for r in batched[group]) / len(batched[group])
        theirs = sum(r.metrics["accuracy"] for r in single[group]) / len(single[group])
        assert ours > 0.75 and abs(ours - theirs) < 0.05, (ours, theirs)
