"""``implicit-bnn``: paper 003, Trinh, Kaski and Heinonen, *Scalable Bayesian neural networks by layer-wise input
augmentation* (the implicit BNN: multiplicative node noise on every layer's input, deterministic weights, a
K-component mixture guide), against weight-space VI and the baselines people compare with.

The method, at every profile (facts from the authors' code, ``shared/papers/REFERENCE_NOTES.md``):

- **Cubic** (the paper's Fig. 1): ``y = x^3 + 2 eps`` on ``[-3, -1) ∪ [1, 3)`` (400 points, step 0.01), ReLU MLPs
  of 1 to 5 hidden layers of 256, Gaussian likelihood with sigma = 1, full-batch Adam, the KL weight rising by
  1/1000 per step to 1. Node noise: ``mixture:8``, prior N(1, 0.3^2), Adam 0.008 (variational) and 0.001
  (weights), no weight decay. Weight-space VI: the library's default mean-field guide under a N(0, 1) prior, Adam
  0.008 (the authors' variational rate). Scored on the noiseless ``x^3`` over [-4, 4], inside and outside the
  data's range.
- **LeNet on Fashion-MNIST** (Fig. 4 plus baselines): LeNet widened by ``M`` (``lenet:M``; the paper's 1x, 4x,
  16x and 64x parameters are M = 1, 2, 4, 8). Node noise ``mixture:K`` with the library's node-noise defaults (prior
  N(1, 0.1^2), SGD Nesterov 0.05 / 0.3, weight decay 5e-4, learning rate decayed to 1 % between 50 % and 90 % of
  training, S = 2 copies per example, 5 samples per component at test time); weight-space VI (default guide, N(0, 1)
  prior, Adam 1e-3); MC dropout (p = 0.1, MAP under the N(0, 1) prior, Adam 1e-3); a deep ensemble of 5 MAP
  networks (same prior and optimiser, the same training examples, different initialisation and batch order); the
  first member alone, and with a temperature fitted on the validation split. Every method is trained on the same
  examples for the same epochs with batch 128.
- **K** in {1, 2, 4, 8, 16} for the node-noise LeNet at M = 1: error, ECE and seconds per training epoch. The
  variational learning rate is 0.075 K (the authors scale it with K; 0.3 at K = 4 is the library's default).
- **Corruptions and out-of-domain data**: Gaussian blend and salt-and-pepper at rising intensity, and MNIST digits
  as out-of-domain inputs (``shift:`` measurement, :mod:`pyro_bnn.reproduce.shift_measures`).

- **CIFAR** (``paper`` profile only, :func:`cifar_specs`): VGG16 and WRN-28x10 on CIFAR-10 and CIFAR-100, node
  noise against the deterministic network, 300 epochs. torchvision downloads CIFAR for a user who is online; this
  project's machines are not, so ``tests/reproduce/test_implicit_bnn.py`` runs a node-noise VGG16 and WRN-28x10
  step on random CIFAR-shaped tensors instead. The analysis is in :mod:`.implicit_bnn_analysis`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pyro_bnn.experiments.config import RunConfig
from pyro_bnn.reproduce.spec import Analysis, Profile, RunRecord, RunSpec, run_tags

OOD_DATA = "mnist"
DROPOUT = 0.1
SAMPLES_PER_COMPONENT = 5
"""The authors' n = 5 test samples per mixture component."""
NODE_NOISE_LR_VARIATIONAL_PER_COMPONENT = 0.075
"""The node-noise default variational learning rate (0.3 for K = 4) per component: K components get 0.075 K."""

METHODS = ("node-noise", "vi", "mc-dropout", "ensemble", "deterministic", "temperature")
"""The LeNet methods, in table order: ``deterministic`` and ``temperature`` are the ensemble's first member, without
and with temperature scaling."""

CIFAR_CELLS = (("cifar10", "vgg16"), ("cifar100", "vgg16"), ("cifar10", "wrn28x10"), ("cifar100", "wrn28x10"))
"""The paper's large-network cells (its Table 2), run at the ``paper`` profile only."""

CIFAR_PRIOR_SCALE = {"vgg16": 0.3, "wrn28x10": 0.1}
"""The authors' node-noise prior N(1, s^2) per network."""

PROFILES = {
    "quick": Profile(
        "quick",
        "smoke run, about a minute on 2 CPU cores; its numbers mean nothing",
        seeds=1,
        settings={
            "depths": (1, 2), "cubic_steps": 30, "cubic_samples": 8,
            "widths": (1,), "ks": (1, 4), "members": 2, "train_images": 600, "val_images": 200, "epochs": 1,
            "test_subset": 300, "shift_images": 100, "samples": 4, "samples_per_component": 1, "cifar": (),
        },
    ),
    "cpu": Profile(
        "cpu",
        "cubic with 2 000 full-batch steps; LeNet x1 and x2 widths (1x and 4x parameters) on 20 000 training images "
        "for 10 epochs: about 3 hours on 2 CPU cores",
        seeds=3,
        settings={
            "depths": (1, 2, 3, 4, 5), "cubic_steps": 2000, "cubic_samples": 40,
            "widths": (1, 2), "ks": (1, 2, 4, 8, 16), "members": 5, "train_images": 20_000, "val_images": 2_000,
            "epochs": 10, "test_subset": None, "shift_images": 1_000, "samples": 20,
            "samples_per_component": SAMPLES_PER_COMPONENT, "cifar": (),
        },
    ),
    "paper": Profile(
        "paper",
        "the authors' 5 000 cubic steps; LeNet at all four widths on all training images for 100 epochs (the paper "
        "gives no LeNet schedule); VGG16 and WRN-28x10 on CIFAR-10/100 for 300 epochs (torchvision downloads CIFAR); "
        "for GPUs",
        seeds=3,
        settings={
            "depths": (1, 2, 3, 4, 5), "cubic_steps": 5000, "cubic_samples": 64,
            "widths": (1, 2, 4, 8), "ks": (1, 2, 4, 8, 16), "members": 5, "train_images": None, "val_images": 5_000,
            "epochs": 100, "test_subset": None, "shift_images": 10_000, "samples": 20,
            "samples_per_component": SAMPLES_PER_COMPONENT, "cifar": CIFAR_CELLS, "cifar_epochs": 300,
        },
    ),
}  # fmt: skip


def cubic_specs(profile: Profile, seed: int) -> list[RunSpec]:
    """Depth x {weight-space VI, node noise K = 8} on the cubic, one seed."""
    steps = profile["cubic_steps"]
    specs = []
    for depth in profile["depths"]:
        base = RunConfig(
            dataset="cubic",
            model="mlp:" + ",".join(["256"] * depth),
            epochs=steps,
            batch_size=400,  # the whole training set: full-batch steps
            val_size=0,
            optimizer="adam",
            kl_anneal=f"linear:{min(1000, max(1, steps // 2))}",
            weight_decay=0.0,
            num_samples=profile["cubic_samples"],
            seed=seed,
        )
        methods = {
            "node-noise": replace(
                base, node_noise=True, guide="mixture:8", prior="normal:1,0.3", lr=0.001, lr_variational=0.008
            ),
            "vi": replace(base, prior="normal:0,1", lr=0.008),
        }
        for method, config in methods.items():
            specs.append(
                RunSpec(
                    config.validate(),
                    label=f"cubic-d{depth}-{method}-s{seed}",
                    measures=("cubic",),
                    tags=run_tags(part="cubic", method=method, depth=depth, seed=seed),
                )
            )
    return specs


def lenet_specs(profile: Profile, seed: int, data_dirs: dict[str, str]) -> list[RunSpec]:
    """Every LeNet run of one seed: the width sweep of every method and the K sweep."""
    base = RunConfig(
        dataset="fashion-mnist",
        epochs=profile["epochs"],
        batch_size=128,
        train_subset=profile["train_images"],
        val_size=profile["val_images"],
        test_subset=profile["test_subset"],
        data_dir=data_dirs.get("fashion-mnist"),
        seed=seed,
        data_seed=seed,
    )
    ood = ((OOD_DATA, data_dirs.get(OOD_DATA)),)
    samples, images = profile["samples"], profile["shift_images"]
    specs = []

    def node_noise(width: int, k: int) -> RunConfig:
        return replace(
            base,
            model=f"lenet:{width}",
            node_noise=True,
            guide=f"mixture:{k}",
            lr_schedule="decay:0.01",
            # The authors' rule: the variational rate is a base rate times K, since each component sees 1/K of
            # the rows. The library's 0.3 is for K = 4; K = 1 at 0.3 diverged in its first epoch.
            lr_variational=NODE_NOISE_LR_VARIATIONAL_PER_COMPONENT * k,
            num_samples=k * profile["samples_per_component"],
        ).validate()

    for width in profile["widths"]:
        model = f"lenet:{width}"
        tags = {"part": "lenet", "width": width, "seed": seed}
        nn4 = node_noise(width, 4)
        methods = {
            "node-noise": nn4,
            "vi": replace(base, model=model, num_samples=samples).validate(),
            "mc-dropout": replace(base, model=model, guide=f"mc-dropout:{DROPOUT}", num_samples=samples).validate(),
        }
        for method, config in methods.items():
            specs.append(
                RunSpec(
                    config,
                    label=f"lenet{width}-{method}-s{seed}",
                    measures=(f"shift:{config.num_samples},{images},{OOD_DATA}",),
                    tags=run_tags(**tags, method=method, **({"k": 4} if method == "node-noise" else {})),
                    other_data=ood,
                )
            )
        member = replace(base, model=model, guide="map", num_samples=1)
        members = []
        for index in range(profile["members"]):
            # Member seeds count on from seed * members, so the ensembles of different seeds share no member;
            # data_seed keeps every member on the seed's examples.
            config = replace(member, seed=seed * profile["members"] + index).validate()
            first = index == 0  # the first member is also the deterministic baseline, with and without T
            members.append(
                RunSpec(
                    config,
                    label=f"lenet{width}-member{index}-s{seed}",
                    measures=(f"shift:1,{images},{OOD_DATA},temperature",) if first else (),
                    tags=run_tags(**tags, method="deterministic" if first else "member", member=index),
                    other_data=ood if first else (),
                )
            )
        specs.extend(members)
        ensemble = replace(member, seed=seed, num_samples=profile["members"]).validate()
        specs.append(
            RunSpec(
                ensemble,
                label=f"lenet{width}-ensemble-s{seed}",
                measures=(f"shift:{profile['members']},{images},{OOD_DATA}",),
                tags=run_tags(**tags, method="ensemble"),
                other_data=ood,
                members=tuple(members),
            )
        )
        if width == profile["widths"][0]:
            for k in profile["ks"]:
                if k == 4:
                    continue  # the width sweep's node-noise run
                specs.append(
                    RunSpec(
                        node_noise(width, k),
                        label=f"lenet{width}-k{k}-s{seed}",
                        tags=run_tags(**tags, method="node-noise", k=k),
                    )
                )
    return specs


def cifar_specs(profile: Profile, seed: int, data_dirs: dict[str, str]) -> list[RunSpec]:
    """The paper's CIFAR cells: node noise (the authors' setting) and the deterministic network, one seed.

    Node noise: ``mixture:4`` with bias noise, prior N(1, s^2) (:data:`CIFAR_PRIOR_SCALE`), SGD Nesterov at 0.05
    (weights, weight decay 5e-4, decayed to 1 % between 50 % and 90 % of training) and 1.2 (variational, the
    authors' 0.3 K), the KL weight rising linearly over the first two thirds of the epochs. The deterministic network
    is the same SGD on the weights alone. Standardised pixels, 5 000 validation images, batch 128, no augmentation
    (the authors crop and flip; the library has no augmentation yet).
    """
    specs = []
    for dataset, model in profile["cifar"]:
        epochs = profile["cifar_epochs"]
        base = RunConfig(
            dataset=dataset,
            model=model,
            epochs=epochs,
            batch_size=128,
            optimizer="sgd",
            lr=0.05,
            weight_decay=5e-4,
            lr_schedule="decay:0.01",
            val_size=5_000,
            normalization="standard",
            data_dir=data_dirs.get(dataset),
            seed=seed,
        )
        methods = {
            "node-noise": replace(
                base,
                node_noise=True,
                bias_noise=True,
                guide="mixture:4",
                prior=f"normal:1,{CIFAR_PRIOR_SCALE[model]}",
                lr_variational=1.2,
                kl_anneal=f"linear:{2 * epochs // 3}",
                num_samples=4 * profile["samples_per_component"],
            ),
            "deterministic": replace(base, guide="mle", num_samples=1),
        }
        for method, config in methods.items():
            specs.append(
                RunSpec(
                    config.validate(),
                    label=f"{dataset}-{model}-{method}-s{seed}",
                    tags=run_tags(part="cifar", dataset=dataset, model=model, method=method, seed=seed),
                )
            )
    return specs


class ImplicitBnn:
    """Paper 003 as a grid and an analysis (see the module docstring)."""

    name = "implicit-bnn"
    title = "Implicit BNNs (node noise) against weight-space VI, MC dropout, deep ensembles and temperature scaling"
    summary = "paper 003: node-noise BNNs vs weight-space VI and baselines; cubic depth, LeNet width and K, shift, OOD"
    profiles = PROFILES

    def plan(self, profile: Profile, seeds: int, data_dirs: dict[str, str]) -> list[RunSpec]:
        specs = []
        for seed in range(seeds):
            specs.extend(cubic_specs(profile, seed))
            specs.extend(lenet_specs(profile, seed, data_dirs))
            specs.extend(cifar_specs(profile, seed, data_dirs))
        return specs

    def analyse(self, records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
        from pyro_bnn.reproduce.papers.implicit_bnn_analysis import analyse

        return analyse(records, profile, out)
