"""``posterior-families``: the library's posterior families side by side on one footing (our own study, not a
paper's), on two moons (the priors paper's 2-5-5-2 tanh net, where NUTS is the reference) and on a 3FC network on a
Fashion-MNIST subset.

Families (rows of the report, :data:`FAMILIES`): NUTS (moons only), mean-field VI (the library's default guide),
low-rank VI, flow VI (IAF; moons only, the flow guide refuses more than 1 024 weights), Laplace around a MAP network
(last layer, and every layer with Kronecker-factored curvature, both with the prior precision tuned by the marginal
likelihood and the GLM probit predictive), SGLD, cyclical SGLD, SWAG and MultiSWAG (:data:`SWAG_LR`), a deep ensemble
of MAP networks and the node-noise mixture (the implicit BNN). Every family sees the same training examples, the same
N(0, 1) prior on every weight and bias (node noise: its own N(1, 0.1^2) prior on the noise) and is scored by one
function (:func:`.scoring.evaluate`): test accuracy, NLL, ECE (15 bins), out-of-domain AUROC by the
predictive entropy (moons: a circle far around the data; Fashion-MNIST: MNIST test images), the wall time of the
fit (the MAP members a Laplace fit or an ensemble is built from included) and on moons the KL from the NUTS
predictive and the median ratio of each weight's marginal sd to NUTS's.

Each (data set, family, seed) is one run of the grid. The families that are not a Trainer run are
:attr:`~pyro_bnn.reproduce.planned.RunSpec.runner` specs (:mod:`.runs`); on moons every family
reads the same seed's NUTS run (its members), so the grid runs NUTS and the MAP members first.

Cost of the ``cpu`` profile, measured on 2026-11-28 with ``--workers 2`` on this 2-core machine (one torch thread
per run): 0.45 h of run time in 16-20 minutes of wall time (three retrains). Moons NUTS takes about 190 s a seed
(4 chains of 200 + 200 iterations, tree depth 8), the largest part; every other moons family 3-45 s; on
Fashion-MNIST (a 3FC of 400 units, 5 000 training images, 10 epochs) 10-75 s per run, the KFAC Laplace runs 14 s
(their GLM predictive from rank-one Jacobians, :mod:`pyro_bnn.laplace.kron_glm`; through laplace-torch's full
Jacobian it took 18-40 minutes a run).
"""

from __future__ import annotations

from dataclasses import replace

from pyro_bnn.reproduce.planned import PLANNED_VI_GUIDE, Profile, RunSpec, run_tags
from pyro_bnn.runs.config import RunConfig

RUNS = "pyro_bnn.reproduce.papers.posterior_families_runs"
"""Prefix of the runners' names ({RUNS}:trained, ...), registered by :mod:`.runs`: the module these runners once lived
in, kept because a runner's name is part of its run's id."""
OOD_DATA = "mnist"

FAMILIES = (
    "nuts", "mean-field", "low-rank", "flow", "laplace-last-layer", "laplace-kfac", "sgld", "cyclical-sgld",
    "swag", "multiswag", "ensemble", "node-noise",
)  # fmt: skip
"""The families in table order."""

MOONS_ONLY = ("nuts", "flow")

PROFILES = {
    "quick": Profile(
        "quick",
        "smoke run of every family on both data sets, about a minute on one core; its numbers mean nothing",
        seeds=1,
        settings={
            "moons_epochs": 20, "moons_samples": 20, "particles": 1,
            "nuts": {"chains": 2, "warmup": 10, "samples": 10, "tree_depth": 3},
            "moons_sgmcmc": {"draws": 8, "burn_in": 20, "thin": 2, "chains": 2},
            "fashion_model": "mlp:32,32,32", "train_images": 300, "val_images": 100, "test_subset": 200,
            "fashion_epochs": 1, "fashion_samples": 4,
            "fashion_sgmcmc": {"draws": 4, "burn_in": 4, "thin": 1, "chains": 1},
            "members": 2, "rank": 2, "moons_swag_epochs": 5, "fashion_swag_epochs": 2,
        },
    ),
    "cpu": Profile(
        "cpu",
        "moons with NUTS as the reference and a 3FC (400 units) on 5 000 Fashion-MNIST images, 3 seeds: about half an "
        "hour of run time on 2 CPU cores (16-20 minutes of wall time with --workers 2), the largest part NUTS",
        seeds=3,
        settings={
            "moons_epochs": 300, "moons_samples": 400, "particles": 8,
            "nuts": {"chains": 4, "warmup": 200, "samples": 200, "tree_depth": 8},
            "moons_sgmcmc": {"draws": 100, "burn_in": 2000, "thin": 20, "chains": 4},
            "fashion_model": "mlp:400,400,400", "train_images": 5_000, "val_images": 1_000, "test_subset": 2_000,
            "fashion_epochs": 10, "fashion_samples": 48,
            "fashion_sgmcmc": {"draws": 20, "burn_in": 600, "thin": 10, "chains": 2},
            "members": 5, "rank": 10, "moons_swag_epochs": 100, "fashion_swag_epochs": 10,
        },
    ),
    "paper": Profile(
        "paper",
        "the One Simple Trick paper's 3FC (1 000 units) on every Fashion-MNIST training image for 50 epochs, NUTS "
        "with 1 000 kept iterations per chain, 5 seeds; for a GPU (its NUTS stays on the CPU)",
        seeds=5,
        settings={
            "moons_epochs": 300, "moons_samples": 1000, "particles": 8,
            "nuts": {"chains": 4, "warmup": 1000, "samples": 1000, "tree_depth": 10},
            "moons_sgmcmc": {"draws": 200, "burn_in": 5000, "thin": 20, "chains": 4},
            "fashion_model": "3fc", "train_images": None, "val_images": 10_000, "test_subset": None,
            "fashion_epochs": 50, "fashion_samples": 100,
            "fashion_sgmcmc": {"draws": 100, "burn_in": 5000, "thin": 50, "chains": 4},
            "members": 5, "rank": 20, "moons_swag_epochs": 100, "fashion_swag_epochs": 20,
        },
    ),
}  # fmt: skip

SGMCMC_STEP = {"moons": {"sgld": 3e-4, "cyclical-sgld": 1e-3}, "fashion-mnist": {"sgld": 3e-5, "cyclical-sgld": 5e-5}}
"""Step sizes ``eps`` (cyclical: the peak ``eps_0``), chosen on seed 0 of the ``cpu`` profile from a ladder of
factors of about 3: on moons the test NLL stopped improving above 3e-4 (SGLD; 1e-3 the same) and cyclical SGLD
matched it at 1e-3 and 3e-3; on Fashion-MNIST SGLD diverged at 1e-4 and 3e-5 was the best that did not."""

SGMCMC_INIT = {"moons": "prior", "fashion-mnist": "network"}
"""Where the chains start: a prior draw on moons (as NUTS); the network's own initialisation on Fashion-MNIST,
where a N(0, 1) draw of a 784-input layer gives logits in the thousands and SGLD diverged at every step size."""

LOWRANK_INIT = {"moons": 0.05, "fashion-mnist": 0.003}
"""The low-rank guide's initial scale per data set. On the Fashion-MNIST subset (cpu profile, seed 0, 10 epochs,
rank 10) the test accuracy was 0.697 at 0.05 (lr 1e-3; 0.6785 at lr 3e-3, chance at 1e-2), 0.776 at 0.01 and 0.830
at 0.003 (0.8095 at lr 3e-3), against 0.807 for mean-field VI: a start of 0.05 on a 784-input layer is noise larger
than the weights, which ten epochs do not shrink. ``results/posterior-families/lowrank-init/`` holds the script
and its output."""

CYCLES = 4
"""Cycles of the cyclical sampler (every cycle keeps the same number of draws)."""

SWAG_LR = {"moons": {"pretrain_lr": 0.1, "lr": 0.05}, "fashion-mnist": {"pretrain_lr": 0.05, "lr": 0.02}}
"""SGD learning rates of SWAG's pretraining and of its collection phase (momentum 0.9, the per-example log joint):
SWAG's own recipe of a constant SWA rate at about half the pretraining rate, not tuned on these data."""


def _spec(config: RunConfig, dataset: str, family: str, seed: int, **fields) -> RunSpec:
    return RunSpec(
        config,
        label=f"{dataset}-{family}-s{seed}",
        tags=run_tags(dataset=dataset, family=family, seed=seed),
        **fields,
    )


def _options(**values: object) -> tuple[tuple[str, str], ...]:
    return run_tags(**values)


def family_specs(
    dataset: str, base: RunConfig, profile: Profile, seed: int, reference: RunSpec | None
) -> list[RunSpec]:
    """Every family of one data set and seed (``base``: the shared data, network, prior and optimiser), the MAP
    members first; ``reference``: the NUTS run they are compared with (moons)."""
    key = "moons" if dataset == "moons" else "fashion"
    samples = profile[f"{key}_samples"]
    ref = (reference,) if reference is not None else ()
    member_base = replace(base, guide="map", num_samples=1, num_particles=1, data_seed=seed)
    members = [
        _spec(replace(member_base, seed=seed * profile["members"] + i), dataset, f"map{i}", seed)
        for i in range(profile["members"])
    ]
    scored = replace(base, num_samples=samples)
    trained = {
        "mean-field": scored,
        "low-rank": replace(scored, guide=f"lowrank:{LOWRANK_INIT[dataset]:g},rank={profile['rank']}"),
        # The flow's autoregressive networks fit the moons network only (a config is checked when made).
        **({"flow": replace(scored, guide="iaf:0.05")} if dataset == "moons" else {}),
        "node-noise": replace(scored, node_noise=True, guide="mixture:4", optimizer="adam", weight_decay=0.0,
                              lr_variational=base.lr),
    }  # fmt: skip
    specs = [*members]
    for family, config in trained.items():
        specs.append(_spec(config, dataset, family, seed, runner=f"{RUNS}:trained", members=ref))
    for family, (subset, structure) in {
        "laplace-last-layer": ("last_layer", "kron"),
        "laplace-kfac": ("all", "kron"),
    }.items():
        options = _options(subset=subset, structure=structure)
        specs.append(_spec(scored, dataset, family, seed, runner=f"{RUNS}:laplace", options=options,
                           members=(members[0], *ref)))  # fmt: skip
    swag_epochs = profile[f"{key}_swag_epochs"]
    for family, models in {"swag": 1, "multiswag": profile["members"]}.items():
        options = _options(**SWAG_LR[dataset], pretrain_epochs=base.epochs, epochs=swag_epochs,
                           rank=profile["rank"], models=models)  # fmt: skip
        specs.append(_spec(scored, dataset, family, seed, runner=f"{RUNS}:swag", options=options, members=ref))
    chain = profile[f"{key}_sgmcmc"]
    for family, method in {"sgld": "sgld", "cyclical-sgld": "csgld"}.items():
        cycles = CYCLES if method == "csgld" else 1
        draws = chain["draws"] - chain["draws"] % cycles or cycles
        burn_in = 1 if method == "csgld" else chain["burn_in"]  # cyclical: whole cycles
        options = _options(method=method, step_size=SGMCMC_STEP[dataset][family], chains=chain["chains"],
                           draws=draws, burn_in=burn_in, thin=chain["thin"], cycles=cycles,
                           init=SGMCMC_INIT[dataset])  # fmt: skip
        specs.append(_spec(scored, dataset, family, seed, runner=f"{RUNS}:sgmcmc", options=options, members=ref))
    specs.append(
        _spec(
            replace(member_base, seed=seed, num_samples=profile["members"]),
            dataset,
            "ensemble",
            seed,
            runner=f"{RUNS}:ensemble",
            members=(*members, *ref),
        )  # fmt: skip
    )
    return specs


def moons_specs(profile: Profile, seed: int) -> list[RunSpec]:
    """NUTS and every family on two moons (640 training, 200 test points of the seed's pool)."""
    base = RunConfig(
        dataset="moons",
        guide=PLANNED_VI_GUIDE,
        model="tanh-small",
        activation="tanh",
        prior="normal:0,1",
        epochs=profile["moons_epochs"],
        batch_size=64,
        optimizer="adam",
        lr=1e-2,
        lr_schedule="decay:0.01",
        num_particles=profile["particles"],
        seed=seed,
        device="cpu",
    )
    # NUTS's config names only what it reads (data, network, prior), so its id, and a finished NUTS run, stay as they
    # are when the trained families' settings change.
    nuts_config = RunConfig(
        dataset="moons",
        guide=PLANNED_VI_GUIDE,
        model="tanh-small",
        activation="tanh",
        prior="normal:0,1",
        num_samples=profile["nuts"]["chains"] * profile["nuts"]["samples"],
        seed=seed,
        device="cpu",
    )
    nuts = _spec(
        nuts_config,
        "moons",
        "nuts",
        seed,
        runner=f"{RUNS}:nuts",
        options=_options(**profile["nuts"]),
    )
    return [nuts, *family_specs("moons", base, profile, seed, nuts)]


def fashion_specs(profile: Profile, seed: int, data_dirs: dict[str, str]) -> list[RunSpec]:
    """Every family but NUTS and the flow on a 3FC network on a Fashion-MNIST subset."""
    base = RunConfig(
        dataset="fashion-mnist",
        guide=PLANNED_VI_GUIDE,
        model=profile["fashion_model"],
        prior="normal:0,1",
        epochs=profile["fashion_epochs"],
        batch_size=128,
        optimizer="adam",
        lr=1e-3,
        train_subset=profile["train_images"],
        val_size=profile["val_images"],
        test_subset=profile["test_subset"],
        data_dir=data_dirs.get("fashion-mnist"),
        seed=seed,
        data_seed=seed,
        device="cpu",
    )
    specs = family_specs("fashion-mnist", base, profile, seed, None)
    ood = ((OOD_DATA, data_dirs.get(OOD_DATA)),)
    return [replace(s, other_data=ood) if not s.trains else s for s in specs]
