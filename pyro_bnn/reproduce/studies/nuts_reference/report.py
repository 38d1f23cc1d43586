"""The Markdown report of :mod:`pyro_bnn.reproduce.studies.nuts_reference` (its tables of chains, r-hat/ESS,
predictive agreement and weight marginals) and the notes that explain them."""

from __future__ import annotations

import math
from pathlib import Path


def _scalars(summary: dict) -> str | int:
    """A summary's scalar count, with the r-hats ArviZ could not tell (NaN, left out of the columns after) where
    there are any (summaries written before they were counted have none)."""
    undefined = summary.get("num_rhat_nan", 0)
    return f"{summary['num_scalars']} ({undefined} undefined)" if undefined else summary["num_scalars"]


def _row(cells) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _fmt(value: float, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.{digits}g}" if abs(value) < 0.01 else f"{value:.{digits}f}"


def markdown_report(result: dict) -> str:
    s = result["settings"]
    first_name = "accuracy" if s["task"] == "classification" else "RMSE"
    lines = [
        f"# NUTS reference vs VI: {result['problem']}",
        "",
        f"Written by `python -m pyro_bnn.reproduce.studies.nuts_reference --task {s['task']}` "
        f"({result['wall_seconds']:.0f} s wall time in all on {result['cpu_count']} CPU cores, one torch thread per "
        f"process; NUTS {result['nuts_seconds']:.0f} s, VI {result['vi_seconds']:.0f} s). The machine was shared: "
        f"its 1-minute load average was {result['load_average_1min']['start']:.1f} at the start and "
        f"{result['load_average_1min']['end']:.1f} at the end.",
        "",
        f"Model: `{result['model']}`, every weight and bias ~ N(0, 1), {result['num_weights']} weights; "
        f"{result['num_train']} training points, {result['num_test']} test points.",
        f"NUTS: {s['num_chains']} chains x {s['num_samples']} draws after {s['warmup']} warm-up iterations, max tree "
        f"depth {s['max_tree_depth']}, full-batch likelihood, each chain started from its own prior draw (seed "
        f"{s['seed']} * 1000 + chain), run in {s['workers']} worker process(es).",
        f"VI: guide `{s['guide']}`, Adam {s['vi_lr']} with cosine decay over {s['vi_epochs']} epochs, batch "
        f"{s['vi_batch_size']}, {s['vi_particles']} particles; {s['vi_draws']} draws for the weight comparison.",
        "",
        "## Chains",
        "",
        _row(
            [
                "chain",
                "seconds",
                "divergences",
                "mean accept prob",
                "step size",
                "leapfrog steps / iteration",
                f"test {first_name}",
                "test NLL",
            ]
        ),
        _row(["---"] * 8),
    ]
    for stats, metrics in zip(result["nuts_chains"], result["predictive"]["metrics_nuts_per_chain"], strict=True):
        first, second = _metric_pair(metrics)
        lines.append(
            _row(
                [
                    stats["chain"],
                    f"{stats['seconds']:.0f}",
                    stats["divergences"],
                    f"{stats['mean_accept_prob']:.2f}",
                    f"{stats['step_size']:.4f}",
                    _fmt(stats["evals_per_iteration"]),
                    first,
                    second,
                ]
            )
        )
    lines += ["", "## Convergence (ArviZ: rank-normalised split r-hat, bulk / tail ESS)", ""]
    lines.append(
        _row(
            [
                "quantity",
                "scalars",
                "r-hat max",
                "r-hat median",
                "r-hat > 1.01",
                "r-hat > 1.1",
                "ESS bulk min",
                "ESS bulk median",
                "ESS tail min",
            ]
        )
    )
    lines.append(_row(["---"] * 9))
    for label, key, part in (
        ("weights, unaligned", "rhat_ess_unaligned", result["weights"]),
        ("weights, aligned to chain 0", "rhat_ess_aligned", result["weights"]),
        ("test predictions", "rhat_ess_test_predictions", result["predictive"]),
    ):
        c = part[key]
        lines.append(
            _row(
                [
                    label,
                    _scalars(c),
                    _fmt(c["rhat_max"]),
                    _fmt(c["rhat_median"]),
                    f"{100 * c['frac_rhat_gt_1.01']:.0f} %",
                    f"{100 * c['frac_rhat_gt_1.1']:.0f} %",
                    _fmt(c["ess_bulk_min"]),
                    _fmt(c["ess_bulk_median"]),
                    _fmt(c["ess_tail_min"]),
                ]
            )
        )
    lines += ["", "Per site (r-hat max / median; ESS bulk min):", ""]
    lines.append(
        _row(["site", "unaligned r-hat max", "median", "ESS bulk min", "aligned r-hat max", "median", "ESS bulk min"])
    )
    lines.append(_row(["---"] * 7))
    for site, parts in result["weights"]["rhat_per_site"].items():
        a, b = parts["unaligned"], parts["aligned"]
        lines.append(
            _row(
                [
                    site,
                    _fmt(a["rhat_max"]),
                    _fmt(a["rhat_median"]),
                    _fmt(a["ess_bulk_min"]),
                    _fmt(b["rhat_max"]),
                    _fmt(b["rhat_median"]),
                    _fmt(b["ess_bulk_min"]),
                ]
            )
        )
    lines += ["", result["notes"]["rhat"], "", "## Predictive agreement on the test points", ""]
    m_nuts, m_vi = result["predictive"]["metrics_nuts"], result["predictive"]["metrics_vi"]
    lines.append(_row(["posterior", f"test {first_name}", "test NLL"]))
    lines.append(_row(["---"] * 3))
    lines.append(_row(["NUTS (all chains)", *_metric_pair(m_nuts)]))
    lines.append(_row(["VI", *_metric_pair(m_vi)]))
    lines += [""]
    distances = result["predictive"]["distances"]
    kinds = list(distances["nuts_vs_vi"])
    lines.append(_row(["pair", *[f"{kind} {stat}" for kind in kinds for stat in ("mean", "median", "max")]]))
    lines.append(_row(["---"] * (1 + 3 * len(kinds))))
    for label, key in (
        ("NUTS vs VI", "nuts_vs_vi"),
        ("NUTS chains 0-1 vs 2-3", "nuts_half_vs_half"),
        ("VI vs VI (fresh draws)", "vi_vs_vi"),
    ):
        row = [label]
        for kind in kinds:
            d = distances[key][kind]
            row += [_fmt(d["mean"]), _fmt(d["median"]), _fmt(d["max"])]
        lines.append(_row(row))
    lines += ["", result["notes"]["distances"], "", "## Weight marginals after alignment", ""]
    lines.append(
        _row(
            [
                "site",
                "mean |mu_VI - mu_NUTS| / sd_NUTS",
                "median",
                "median sd_VI / sd_NUTS",
                "(vs all aligned chains) mean |dz|",
                "median sd ratio",
            ]
        )
    )
    lines.append(_row(["---"] * 6))
    chain0 = result["weights"]["marginals_vs_chain0"]
    pooled = result["weights"]["marginals_vs_all_chains_aligned"]
    for site in chain0:
        a, b = chain0[site], pooled[site]
        lines.append(
            _row(
                [
                    site,
                    _fmt(a["mean_abs_z"]),
                    _fmt(a["median_abs_z"]),
                    _fmt(a["median_sd_ratio"]),
                    _fmt(b["mean_abs_z"]),
                    _fmt(b["median_sd_ratio"]),
                ]
            )
        )
    lines += ["", result["notes"]["marginals"], "", "## Shape of the marginals", ""]
    lines.append(
        _row(
            [
                "draws",
                "median abs skewness",
                "median excess kurtosis",
                "abs kurtosis > 1",
                "kurtosis < -1",
                "median KS",
                "KS > 0.1",
            ]
        )
    )
    lines.append(_row(["---"] * 7))
    for label, key in (
        ("NUTS chain 0", "normality_nuts_chain0"),
        ("NUTS all chains aligned", "normality_nuts_aligned_pooled"),
        ("VI", "normality_vi"),
    ):
        n = result["weights"][key]
        lines.append(
            _row(
                [
                    label,
                    _fmt(n["median_abs_skewness"]),
                    _fmt(n["median_excess_kurtosis"]),
                    f"{100 * n['frac_abs_kurtosis_gt_1']:.0f} %",
                    f"{100 * n['frac_kurtosis_lt_-1']:.0f} %",
                    _fmt(n["median_ks"]),
                    f"{100 * n['frac_ks_gt_0.1']:.0f} %",
                ]
            )
        )
    lines += [
        "",
        f"VI's ELBO loss (mean over {result['vi_curve']['window_epochs']} epochs): first "
        f"{result['vi_curve']['loss_first_window']:.1f}, middle {result['vi_curve']['loss_mid_window']:.1f}, "
        f"last {result['vi_curve']['loss_last_window']:.1f}.",
        "",
    ]
    lines += ["Figures: " + ", ".join(f"`{Path(path).name}`" for path in result["figures"]), ""]
    return "\n".join(lines)


def _metric_pair(metrics: dict) -> tuple[str, str]:
    if "accuracy" in metrics:
        return f"{metrics['accuracy']:.3f}", f"{metrics['nll']:.3f}"
    return f"{metrics['rmse']:.3f}", f"{metrics['nll']:.3f}"


NOTES = {
    "rhat": (
        "Weights: a BNN's posterior is invariant under permuting (and, for tanh, sign-flipping) hidden units, so "
        "chains from different starts sit in relabelled copies of the same modes; aligning each chain's units to "
        "chain 0 (Hungarian matching of chain-mean incoming + bias + outgoing weights, with sign flips) removes "
        "that part. What r-hat still shows after alignment is genuine multimodality (chains in modes that no "
        "relabelling maps onto each other), chains that have not mixed, or a chain that moves between relabelled "
        "copies by itself (wide, symmetric marginals within one chain, as some first-layer weights show in the "
        "marginals figure), which one relabelling per chain cannot undo. The test predictions are invariant to "
        "relabelling, so their r-hat is the fairer convergence check of the function the chains represent."
    ),
    "distances": (
        "KL: KL(NUTS mean predictive || VI mean predictive) per test point, nats (regression: between Gaussians "
        "moment-matched to each predictive, noise included). W1: Wasserstein-1 between the two sets of per-sample "
        "p(class 1) (regression: of the sampled f(x)) per test point. The NUTS half-vs-half and VI-vs-VI rows are "
        "baselines: the size of a difference that Monte Carlo noise and between-chain variation alone produce."
    ),
    "marginals": (
        "VI's draws are aligned to NUTS chain 0's mean with the same matching. |dz| = |mu_VI - mu_NUTS| / sd_NUTS "
        "per weight; sd ratio = sd_VI / sd_NUTS (mean-field VI is expected to under-estimate spread, ratio < 1, "
        "and to miss the correlations entirely). The first columns compare with chain 0 alone (one mode), the "
        "last two with all aligned chains pooled (which also holds the between-mode spread)."
    ),
}


# ------------------------------------------------------------------------------------------------- driver
