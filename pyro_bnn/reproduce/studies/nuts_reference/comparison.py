"""How the NUTS reference and VI compare (:mod:`pyro_bnn.reproduce.studies.nuts_reference`): weight marginals after
aligning hidden units, normality of the marginals, per-chain metrics, and the predictive distributions."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import pyro
import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.diagnostics.arviz_export import (
    convergence_summary,
    normality_scores,
    to_inference_data,
)
from pyro_bnn.diagnostics.nuts import (
    align_hidden_units,
    hidden_layers,
    predictive_distance,
    wasserstein_1d,
)
from pyro_bnn.predict import Prediction, predict

if TYPE_CHECKING:
    from pyro_bnn.reproduce.studies.nuts_reference.reference import Settings


def flat_chains(samples: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: value.reshape(-1, *value.shape[2:]) for name, value in samples.items()}


def _stats(value: torch.Tensor) -> dict[str, float]:
    value = value.double()
    return {
        "mean": float(value.mean()),
        "median": float(value.median()),
        "p90": float(value.quantile(0.9)),
        "max": float(value.max()),
    }


# ------------------------------------------------------------------------------------------ weight space
def _marginal_comparison(nuts: dict, vi: dict, sites: list[str]) -> dict[str, dict[str, float]]:
    """Per site: mean and median of ``|mu_VI - mu_NUTS| / sd_NUTS`` and the median of ``sd_VI / sd_NUTS``."""
    table, all_z, all_ratio = {}, [], []
    for site in sites:
        ref = nuts[site].reshape(-1, *nuts[site].shape[2:]).double()
        other = vi[site].reshape(-1, *vi[site].shape[2:]).double()
        sd = ref.std(0)
        z = ((other.mean(0) - ref.mean(0)).abs() / sd).reshape(-1)
        ratio = (other.std(0) / sd).reshape(-1)
        all_z.append(z)
        all_ratio.append(ratio)
        table[site] = {
            "mean_abs_z": float(z.mean()),
            "median_abs_z": float(z.median()),
            "median_sd_ratio": float(ratio.median()),
            "mean_sd_ratio": float(ratio.mean()),
        }
    z, ratio = torch.cat(all_z), torch.cat(all_ratio)
    table["all"] = {
        "mean_abs_z": float(z.mean()),
        "median_abs_z": float(z.median()),
        "median_sd_ratio": float(ratio.median()),
        "mean_sd_ratio": float(ratio.mean()),
    }
    return table


def _normality_summary(samples: dict) -> dict[str, float]:
    scores = normality_scores(samples)
    kurt = torch.cat([s["excess_kurtosis"].reshape(-1) for s in scores.values()])
    skew = torch.cat([s["skewness"].reshape(-1) for s in scores.values()])
    ks = torch.cat([s["ks_distance"].reshape(-1) for s in scores.values()])
    return {
        "median_abs_skewness": float(skew.abs().median()),
        "median_excess_kurtosis": float(kurt.median()),
        "frac_abs_kurtosis_gt_1": float((kurt.abs() > 1).double().mean()),
        "frac_kurtosis_lt_-1": float((kurt < -1).double().mean()),
        "median_ks": float(ks.median()),
        "frac_ks_gt_0.1": float((ks > 0.1).double().mean()),
    }


def weight_space(bnn: BNN, nuts: dict, vi_draws: dict, settings: Settings) -> tuple[dict, dict, dict]:
    """Alignment, r-hat / ESS before and after it, marginal comparison, normality; returns (report, aligned NUTS,
    aligned VI)."""
    layers = hidden_layers(bnn)
    aligned, permutations = align_hidden_units(nuts, 0, layers, return_permutations=True)
    # VI is matched to the reference chain's mean, so "unit j" means the same unit in VI and in every chain.
    reference = {name: value[0].mean(0) for name, value in aligned.items()}
    vi_aligned = align_hidden_units(vi_draws, reference, layers)
    sites = bnn.site_names
    pooled_sites = {name: aligned[name] for name in sites}
    chain0 = {name: aligned[name][:1] for name in sites}
    unaligned_data = to_inference_data(bnn, {name: nuts[name] for name in sites})
    aligned_data = to_inference_data(bnn, pooled_sites)
    report = {
        "layers": [asdict(layer) for layer in layers],
        "permutations": [{"perm": perm.tolist(), "signs": sign.int().tolist()} for perm, sign in permutations],
        "rhat_ess_unaligned": convergence_summary(unaligned_data),
        "rhat_ess_aligned": convergence_summary(aligned_data),
        "rhat_per_site": {
            site: {
                "unaligned": convergence_summary(unaligned_data, [site]),
                "aligned": convergence_summary(aligned_data, [site]),
            }
            for site in sites
        },
        "marginals_vs_chain0": _marginal_comparison(chain0, vi_aligned, sites),
        "marginals_vs_all_chains_aligned": _marginal_comparison(pooled_sites, vi_aligned, sites),
        "normality_nuts_chain0": _normality_summary(chain0),
        "normality_nuts_aligned_pooled": _normality_summary(pooled_sites),
        "normality_vi": _normality_summary({name: vi_aligned[name] for name in sites}),
    }
    return report, aligned, vi_aligned


# -------------------------------------------------------------------------------------------- predictions
def _per_chain_metrics(bnn: BNN, nuts: dict, x: torch.Tensor, y: torch.Tensor) -> list[dict[str, float]]:
    return [
        predict(bnn, {name: value[chain] for name, value in nuts.items() if name in bnn.site_names}, (x, y)).metrics()
        for chain in range(next(iter(nuts.values())).shape[0])
    ]


def _function_space_rhat(values: torch.Tensor, bnn: BNN, name: str) -> dict[str, float]:
    """r-hat / ESS of per-test-point predictive quantities ``(chain, draw, N)``: permutation-invariant."""
    return convergence_summary(to_inference_data(bnn, {name: values}))


def _test_predictions(bnn, guide, nuts, data, settings) -> tuple[int, int, Prediction, Prediction, Prediction]:
    """``(chains, draws, NUTS prediction, VI prediction, a second VI prediction)`` on the test set; the VI ones
    draw as many samples as NUTS kept, after seeding Pyro with ``settings.seed + 1``."""
    x, y = data.test.x, data.test.y
    chains, draws = next(iter(nuts.values())).shape[:2]
    nuts_pred = predict(bnn, flat_chains({n: nuts[n] for n in bnn.site_names}), (x, y))
    pyro.set_rng_seed(settings.seed + 1)
    vi_pred = predict(bnn, guide, (x, y), num_samples=chains * draws)
    vi_pred_2 = predict(bnn, guide, (x, y), num_samples=chains * draws)
    return chains, draws, nuts_pred, vi_pred, vi_pred_2


def classification_predictive(bnn, guide, nuts, data, settings) -> tuple[dict, Prediction, Prediction]:
    x, y = data.test.x, data.test.y
    chains, draws, nuts_pred, vi_pred, vi_pred_2 = _test_predictions(bnn, guide, nuts, data, settings)
    half = chains // 2
    split_a, split_b = nuts_pred.probs.reshape(chains, draws, *nuts_pred.probs.shape[1:]).split([half, chains - half])
    split_a, split_b = split_a.reshape(-1, *split_a.shape[2:]), split_b.reshape(-1, *split_b.shape[2:])

    def pair(a: torch.Tensor, b: torch.Tensor) -> dict:
        return {kind: _stats(predictive_distance(a, b, kind=kind)) for kind in ("kl", "w1")}

    distances = {
        "nuts_vs_vi": pair(nuts_pred.probs, vi_pred.probs),
        "nuts_half_vs_half": pair(split_a, split_b),
        "vi_vs_vi": pair(vi_pred.probs, vi_pred_2.probs),
    }
    p_class = nuts_pred.probs[..., 1].reshape(chains, draws, -1)
    report = {
        "metrics_nuts": nuts_pred.metrics(),
        "metrics_vi": vi_pred.metrics(),
        "metrics_nuts_per_chain": _per_chain_metrics(bnn, nuts, x, y),
        "distances": distances,
        "rhat_ess_test_predictions": _function_space_rhat(p_class, bnn, "p_class1"),
    }
    return report, nuts_pred, vi_pred


def _gaussian_kl(mean_a, var_a, mean_b, var_b) -> torch.Tensor:
    return 0.5 * (var_a / var_b + (mean_b - mean_a).square() / var_b - 1 + var_b.log() - var_a.log())


def regression_predictive(bnn, guide, nuts, data, settings) -> tuple[dict, Prediction, Prediction]:
    x, y = data.test.x, data.test.y
    chains, draws, nuts_pred, vi_pred, vi_pred_2 = _test_predictions(bnn, guide, nuts, data, settings)
    noise = float(nuts_pred.noise_scale) ** 2

    def distances(a: Prediction | torch.Tensor, b: Prediction | torch.Tensor) -> dict:
        fa = a.means[..., 0] if isinstance(a, Prediction) else a
        fb = b.means[..., 0] if isinstance(b, Prediction) else b
        kl = _gaussian_kl(fa.mean(0), fa.var(0) + noise, fb.mean(0), fb.var(0) + noise)
        return {"kl_moment_matched": _stats(kl), "w1_f": _stats(wasserstein_1d(fa, fb))}

    f = nuts_pred.means[..., 0].reshape(chains, draws, -1)
    half = chains // 2
    report = {
        "metrics_nuts": nuts_pred.metrics(),
        "metrics_vi": vi_pred.metrics(),
        "metrics_nuts_per_chain": _per_chain_metrics(bnn, nuts, x, y),
        "distances": {
            "nuts_vs_vi": distances(nuts_pred, vi_pred),
            "nuts_half_vs_half": distances(f[:half].reshape(-1, f.shape[-1]), f[half:].reshape(-1, f.shape[-1])),
            "vi_vs_vi": distances(vi_pred, vi_pred_2),
        },
        "rhat_ess_test_predictions": _function_space_rhat(f, bnn, "f_test"),
    }
    return report, nuts_pred, vi_pred


# ------------------------------------------------------------------------------------------------ figures
