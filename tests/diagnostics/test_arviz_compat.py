"""pyro_bnn.diagnostics.arviz_compat: which ArviZ generation it picks and how to force one, the container it builds
from dicts in each, the two generations giving the same numbers, ``diagnose --shape`` end to end on each, and
ArviZ kept out of imports and out of the CLI's stderr."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pyro_bnn.diagnostics import arviz_compat

CHAINS, DRAWS, OBS = 3, 150, 9


def _arrays(seed: int = 0, shift: float = 0.0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "posterior": {"w": rng.normal(size=(CHAINS, DRAWS, 3, 2)), "b": rng.normal(size=(CHAINS, DRAWS))},
        "log_likelihood": {"obs": rng.normal(-1.0, 0.3, size=(CHAINS, DRAWS, OBS)) - shift},
        "observed_data": {"y": np.arange(OBS) % 2},
    }


def _build(seed: int = 0, shift: float = 0.0):
    arrays = _arrays(seed, shift)
    return arviz_compat.from_dicts(
        arrays["posterior"],
        log_likelihood=arrays["log_likelihood"],
        observed_data=arrays["observed_data"],
        dims={"w": ["unit", "input"], "obs": ["obs_id"], "y": ["obs_id"]},
        coords={"unit": ["a", "b", "c"]},
    )


# ------------------------------------------------------------------------------------------ the choice
def test_the_backend_follows_the_environment_variable_else_the_installed_arviz(monkeypatch):
    monkeypatch.delenv(arviz_compat.ENV_VAR, raising=False)
    expected = arviz_compat.LEGACY if arviz_compat.available(arviz_compat.LEGACY) else arviz_compat.REFACTORED
    assert arviz_compat.backend() == expected  # ArviZ 0.x users get the InferenceData their az.* functions take
    for name in arviz_compat.BACKENDS:
        if arviz_compat.available(name):
            monkeypatch.setenv(arviz_compat.ENV_VAR, f" {name.upper()} ")
            assert arviz_compat.backend() == name
    monkeypatch.setenv(arviz_compat.ENV_VAR, "arviz2")
    with pytest.raises(ValueError, match="names no ArviZ backend"):
        arviz_compat.backend()
    with pytest.raises(ValueError, match="unknown ArviZ backend"):
        arviz_compat.available("arviz2")


def test_a_forced_backend_that_is_not_installed_says_what_to_install(monkeypatch):
    monkeypatch.setattr(arviz_compat, "_importable", lambda module: module == "arviz")
    monkeypatch.setenv(arviz_compat.ENV_VAR, arviz_compat.REFACTORED)
    with pytest.raises(ImportError, match="pip install arviz-base"):
        arviz_compat.backend()
    monkeypatch.setattr(arviz_compat, "_importable", lambda module: False)
    monkeypatch.delenv(arviz_compat.ENV_VAR)
    with pytest.raises(ImportError, match="needs ArviZ"):
        arviz_compat.backend()


# ------------------------------------------------------------------------------------------ building
def test_from_dicts_builds_each_generations_container_with_groups_dims_and_coords(arviz_backend):
    data = _build()
    assert type(data).__name__ == ("InferenceData" if arviz_backend == arviz_compat.LEGACY else "DataTree")
    assert arviz_compat.backend_of(data) == arviz_backend
    assert arviz_compat.group_names(data) == ["posterior", "log_likelihood", "observed_data"]
    posterior = arviz_compat.group(data, "posterior")
    assert posterior["w"].dims == ("chain", "draw", "unit", "input")
    assert posterior["w"]["unit"].values.tolist() == ["a", "b", "c"]
    assert posterior["w"]["input"].values.tolist() == [0, 1]
    assert posterior["b"].dims == ("chain", "draw")
    np.testing.assert_array_equal(posterior["w"].values, _arrays()["posterior"]["w"])
    assert arviz_compat.group(data, "log_likelihood")["obs"].dims == ("chain", "draw", "obs_id")
    observed = arviz_compat.group(data, "observed_data")["y"]
    assert observed.dims == ("obs_id",)  # observations carry no sample dimensions
    np.testing.assert_array_equal(observed.values, np.arange(OBS) % 2)
    with pytest.raises(KeyError, match="no 'posterior_predictive' group"):
        arviz_compat.group(data, "posterior_predictive")


def test_a_container_is_read_by_its_own_generation_whatever_the_choice_is_now(both_arviz_backends, monkeypatch):
    monkeypatch.setenv(arviz_compat.ENV_VAR, arviz_compat.LEGACY)
    legacy = _build()
    monkeypatch.setenv(arviz_compat.ENV_VAR, arviz_compat.REFACTORED)
    assert arviz_compat.backend_of(legacy) == arviz_compat.LEGACY
    assert float(arviz_compat.rhat(legacy)["b"]) < 1.05
    assert arviz_compat.loo(legacy).native.__class__.__module__.startswith("arviz.")
    with pytest.raises(ValueError, match="one ArviZ backend"):
        arviz_compat.compare({"legacy": legacy, "refactored": _build()})


# ------------------------------------------------------------------------------------------ the numbers
def _statistics(data) -> dict:
    loo = arviz_compat.loo(data)
    return {
        "rhat": arviz_compat.rhat(data)["w"].values,
        "ess_bulk": arviz_compat.ess(data, ["w"])["w"].values,
        "ess_tail": arviz_compat.ess(data, ["w"], method="tail")["w"].values,
        "ess_mean": arviz_compat.ess(data, ["b"], method="mean")["b"].values,
        "loo": np.array([loo.elpd, loo.se, loo.p]),
        "pareto_k": loo.pareto_k,
        "summary": arviz_compat.summary(data),
        "compare": arviz_compat.compare({"same": data, "worse": _build(shift=0.5)})[["elpd", "p", "se"]].to_numpy(),
    }


def test_both_generations_give_the_same_numbers(both_arviz_backends, monkeypatch):
    results = {}
    for name in arviz_compat.BACKENDS:
        monkeypatch.setenv(arviz_compat.ENV_VAR, name)
        results[name] = _statistics(_build())
    legacy, refactored = results[arviz_compat.LEGACY], results[arviz_compat.REFACTORED]
    for key in ("rhat", "ess_bulk", "ess_tail", "ess_mean"):  # the same estimators
        np.testing.assert_allclose(refactored[key], legacy[key], rtol=1e-9, err_msg=key)
    same = ["mean", "mcse_mean", "ess_bulk", "r_hat"]
    np.testing.assert_allclose(refactored["summary"][same], legacy["summary"][same], rtol=1e-9)
    n = CHAINS * DRAWS  # sd: ArviZ 0.x divides by n - 1, arviz-stats by n
    np.testing.assert_allclose(refactored["summary"]["sd"] * np.sqrt(n / (n - 1)), legacy["summary"]["sd"], rtol=1e-9)
    # PSIS: the generations fit the Pareto tail a little differently (its length, the prior on k)
    np.testing.assert_allclose(refactored["loo"], legacy["loo"], rtol=1e-3, err_msg="loo")
    np.testing.assert_allclose(refactored["compare"], legacy["compare"], rtol=1e-3, err_msg="compare")
    np.testing.assert_allclose(refactored["pareto_k"], legacy["pareto_k"], atol=0.1, err_msg="pareto_k")


def test_loo_under_25_draws_is_plain_importance_sampling_in_both_generations(arviz_backend):
    rng = np.random.default_rng(4)
    log_lik = rng.normal(-1.0, 0.5, size=(1, 12, OBS))
    data = arviz_compat.from_dicts(
        {"b": rng.normal(size=(1, 12))}, log_likelihood={"obs": log_lik}, dims={"obs": ["obs_id"]}
    )
    with pytest.warns(UserWarning, match="Pareto"):
        loo = arviz_compat.loo(data)  # arviz-stats alone raises "n_draws_tail must be at least 5" here
    # elpd_i = log of the self-normalised importance-weighted predictive = -log mean(1 / p(y_i | draw))
    expected = -np.log(np.mean(np.exp(-log_lik[0]), axis=0))
    assert loo.elpd == pytest.approx(expected.sum(), rel=1e-12)
    assert np.isinf(loo.pareto_k).all() and loo.warning


def test_summary_loo_and_compare_in_each_generation(arviz_backend):
    data = _build()
    summary = arviz_compat.summary(data)
    assert list(summary.columns) == list(arviz_compat.SUMMARY_COLUMNS)
    assert list(summary.index[:2]) == ["w[a, 0]", "w[a, 1]"] and len(summary) == 7
    w = _arrays()["posterior"]["w"]
    np.testing.assert_allclose(summary.loc["w[b, 1]", "mean"], w[:, :, 1, 1].mean(), rtol=1e-12)  # unrounded
    loo = arviz_compat.loo(data)
    assert loo.n_samples == CHAINS * DRAWS and loo.n_data_points == OBS and loo.pareto_k.shape == (OBS,)
    assert not loo.warning
    table = arviz_compat.compare({"worse": _build(shift=0.5), "same": data})
    assert list(table.columns) == list(arviz_compat.COMPARE_COLUMNS)
    assert list(table.index) == ["same", "worse"] and table["rank"].tolist() == [0, 1]
    assert table.loc["worse", "elpd_diff"] == pytest.approx(0.5 * OBS, rel=1e-9)
    assert table["weight"].sum() == pytest.approx(1.0, abs=1e-6)


# ------------------------------------------------------------------------------------------ imports and warnings
def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        check=False,
    )


def test_importing_pyro_bnn_and_a_cli_command_import_no_arviz():
    result = _python(
        """
        import sys
        import pyro_bnn, pyro_bnn.diagnostics, pyro_bnn.runs.diagnose
        from pyro_bnn.cli import main
        assert main(["list"]) == 0
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"arviz", "arviz_base", "arviz_stats"})
        print("ARVIZ", loaded)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "ARVIZ []" in result.stdout


TINY_RUN = dict(
    dataset="moons",
    model="tanh-small",
    activation="tanh",
    guide="flat:rel=1",
    epochs=2,
    batch_size=64,
    lr=0.02,
    num_samples=4,
    num_val_samples=2,
    device="cpu",
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from pyro_bnn.runs import RunConfig, train_run

    out = tmp_path_factory.mktemp("arviz") / "run"
    train_run(RunConfig(**TINY_RUN), out, progress=False)
    return out


def _shape(run) -> dict:
    from pyro_bnn.cli import main

    assert main(["diagnose", str(run), "--shape", "--num-samples", "12", "--quiet"]) == 0
    return json.loads((run / "diagnostics.json").read_text())["shape"]


def test_diagnose_shape_gives_the_same_report_with_either_generation(both_arviz_backends, tiny_run, monkeypatch):
    reports = {}
    for name in arviz_compat.BACKENDS:
        monkeypatch.setenv(arviz_compat.ENV_VAR, name)
        reports[name] = _shape(tiny_run)
    legacy, refactored = reports[arviz_compat.LEGACY], reports[arviz_compat.REFACTORED]
    assert legacy["loo"]["train_points"] > 0 and math.isfinite(legacy["loo"]["elpd_loo"])
    assert refactored["loo"] == pytest.approx(legacy["loo"], rel=1e-9)  # float64 log-likelihoods
    assert refactored["normality"] == legacy["normality"]  # pure torch, same seed


def test_the_cli_shows_no_arviz_future_warning(tiny_run, tmp_path):
    """ArviZ 0.x warns about its refactor when imported (the refactored path never imports ``arviz``)."""
    if not arviz_compat.available(arviz_compat.LEGACY):
        pytest.skip("ArviZ 0.x, whose import warns, is not installed here")
    # ArviZ 0.x warns once a day, stamped in the user's cache directory: a fresh one for each process
    plain = _python("import arviz", XDG_CACHE_HOME=str(tmp_path / "cache-1"))
    if "FutureWarning" not in plain.stderr:  # the control: this ArviZ does warn on a plain import
        pytest.skip("this ArviZ 0.x does not warn on import (arviz-base, -stats and -plots are all installed)")
    result = _python(
        f"""
        import sys
        from pyro_bnn.cli import main
        sys.exit(main(["diagnose", {str(tiny_run)!r}, "--shape", "--num-samples", "6"]))
        """,
        XDG_CACHE_HOME=str(tmp_path / "cache-2"),
        PYRO_BNN_ARVIZ=arviz_compat.LEGACY,
    )
    assert result.returncode == 0, result.stderr
    assert "FutureWarning" not in result.stderr and "ArviZ is undergoing" not in result.stderr + result.stdout
