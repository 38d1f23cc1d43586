"""``implicit-bnn`` (paper 003): the node-noise settings of the paper and the authors' code that the never-run
profiles follow and the committed grids' profiles keep, the departures their reports state, and the CIFAR cells in
the paper's Table 2 setting."""

from __future__ import annotations

from pyro_bnn.reproduce import Status
from pyro_bnn.reproduce.papers.implicit_bnn import ImplicitBnn
from pyro_bnn.reproduce.papers.implicit_bnn.analysis import _cifar
from pyro_bnn.reproduce.papers.implicit_bnn.departures import cubic_departures, lenet_departures
from pyro_bnn.reproduce.papers.implicit_bnn.plan import CIFAR_CELLS, PROFILES
from pyro_bnn.reproduce.planned import RunRecord


def test_the_never_run_profiles_train_node_noise_as_the_authors_and_the_committed_ones_as_their_grids():
    """``gpu`` and ``paper`` (no grid yet): bias noise everywhere, LeNet's KL weight rising from 0 to 1 over the
    first two thirds of the epochs, the cubic on the paper's 30 points with the notebook's KL (not divided by N:
    temperature N) and 8 copies a point. ``cpu`` and ``cpu-widths`` (committed grids) keep the settings of their run
    ids: no bias noise, a constant KL weight, the 400-point cubic under the ELBO with S = 2."""
    for name, ramp in (("gpu", "linear:13"), ("paper", "linear:66")):
        specs = ImplicitBnn().plan(PROFILES[name], 1, {})
        noisy = [s for s in specs if s.config.node_noise]
        assert noisy and all(s.config.bias_noise for s in noisy)
        lenet = [s.config for s in noisy if s.tag("part") == "lenet"]
        assert {c.kl_anneal for c in lenet} == {ramp} and {c.samples_per_example for c in lenet} == {2}
        for spec in (s for s in specs if s.tag("part") == "cubic"):
            c = spec.config
            assert (c.train_subset, c.batch_size, c.kl_anneal) == (30, 30, "linear:1000")
            if spec.tag("method") == "node-noise":
                assert (c.temperature, c.samples_per_example) == (30.0, 8)
            else:  # weight-space VI keeps the ELBO
                assert (c.temperature, c.node_noise) == (1.0, False)
    for name in ("cpu", "cpu-widths"):
        noisy = [s.config for s in ImplicitBnn().plan(PROFILES[name], 1, {}) if s.config.node_noise]
        assert noisy and not any(c.bias_noise for c in noisy)
        assert {c.kl_anneal for c in noisy if c.dataset != "cubic"} == {"constant"}
        cubic = [c for c in noisy if c.dataset == "cubic"]
        assert all((c.train_subset, c.batch_size, c.temperature, c.samples_per_example) == (None, 400, 1.0, 2)
                   for c in cubic)  # fmt: skip


def test_the_reports_of_the_committed_profiles_name_their_departures_and_the_authors_profiles_none():
    def records(profile):
        return [RunRecord(s, Status.DONE, {}) for s in ImplicitBnn().plan(PROFILES[profile], 1, {})]

    cpu = records("cpu")
    assert "no bias noise" in lenet_departures(cpu) and "KL weight 1 from the first step" in lenet_departures(cpu)
    words = cubic_departures(cpu)
    for part in ("no bias noise", "the ELBO", "S = 2 copies", "the notebook's 400 points (the paper's text: 30)"):
        assert part in words, part
    assert lenet_departures(records("cpu-widths")) and not cubic_departures(records("cpu-widths"))
    for profile in ("gpu", "paper"):
        assert lenet_departures(records(profile)) == cubic_departures(records(profile)) == ""


def test_the_paper_profile_adds_the_papers_cifar_networks_in_the_authors_setting(tmp_path):
    profile = PROFILES["paper"]
    cifar = [s for s in ImplicitBnn().plan(profile, 1, {"cifar10": "/c10"}) if s.tag("part") == "cifar"]
    assert {(s.config.dataset, s.config.model) for s in cifar} == set(CIFAR_CELLS)
    assert len(cifar) == 2 * len(CIFAR_CELLS)
    # the paper's Table 2, one column per cell: lambda_0, lambda_1, sigma_0 (mu init), prior s, weight decay
    table_2 = {
        ("cifar10", "vgg16"): (0.05, 1.2, 0.75, 0.3, 5e-4),
        ("cifar100", "vgg16"): (0.05, 1.6, 0.75, 0.3, 3e-4),
        ("cifar10", "wrn28x10"): (0.1, 2.4, 0.5, 0.1, 5e-4),
        ("cifar100", "wrn28x10"): (0.1, 4.8, 0.5, 0.1, 5e-4),
    }
    for spec in cifar:
        c = spec.config
        lr, lr_variational, loc_std, prior_scale, weight_decay = table_2[(c.dataset, c.model)]
        assert (c.epochs, c.batch_size, c.optimizer, c.lr, c.weight_decay, c.normalization) == (
            300, 128, "sgd", lr, weight_decay, "standard"
        )  # fmt: skip
        assert c.data_dir == ("/c10" if c.dataset == "cifar10" else None)
        if spec.tag("method") == "node-noise":
            assert (c.guide, c.bias_noise, c.lr_variational, c.kl_anneal, c.samples_per_example) == (
                f"mixture:4,loc_std={loc_std:g}", True, lr_variational, "linear:200", 2
            )  # fmt: skip
            assert c.prior == f"normal:1,{prior_scale:g}"
        else:
            assert c.guide == "mle" and not c.node_noise
    # the report's CIFAR table, from hand-made records
    records = [RunRecord(spec, Status.DONE, {"accuracy": 0.9, "nll": 0.3, "ece": 0.02}) for spec in cifar]
    section = _cifar(records, profile, tmp_path)
    assert section.tables[0].count("| 10.00 (1 seed) |") == len(cifar)
