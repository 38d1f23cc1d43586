"""The CIFAR cells of ``implicit-bnn`` (the ``paper`` profile only, never run here): VGG16 and WRN-28x10 on
CIFAR-10 and CIFAR-100, node noise in the authors' setting (the paper's Table 2, per cell) against the
deterministic network."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyro_bnn.reproduce.planned import Profile, RunSpec, run_tags
from pyro_bnn.runs.config import RunConfig

CIFAR_CELLS = (("cifar10", "vgg16"), ("cifar100", "vgg16"), ("cifar10", "wrn28x10"), ("cifar100", "wrn28x10"))
"""The paper's large-network cells (its Table 2), run at the ``paper`` profile only."""


@dataclass(frozen=True)
class Table2Cell:
    """One column of the paper's Table 2 (the hyperparameters of its CIFAR experiments).

    Attributes:
        lr: lambda_0, the deterministic weights' initial learning rate (SGD, Nesterov 0.9).
        lr_variational: lambda_1, the variational parameters' constant learning rate.
        loc_std: sigma_0: the mixture components' means start at N(1, sigma_0^2).
        prior_scale: s of the node-noise prior N(1, s^2).
        weight_decay: of the deterministic weights.
        samples: S, copies of every example per step.
    """

    lr: float
    lr_variational: float
    loc_std: float
    prior_scale: float
    weight_decay: float
    samples: int = 2


CIFAR_TABLE_2 = {
    ("cifar10", "vgg16"): Table2Cell(lr=0.05, lr_variational=1.2, loc_std=0.75, prior_scale=0.3, weight_decay=5e-4),
    ("cifar100", "vgg16"): Table2Cell(lr=0.05, lr_variational=1.6, loc_std=0.75, prior_scale=0.3, weight_decay=3e-4),
    ("cifar10", "wrn28x10"): Table2Cell(lr=0.1, lr_variational=2.4, loc_std=0.5, prior_scale=0.1, weight_decay=5e-4),
    ("cifar100", "wrn28x10"): Table2Cell(lr=0.1, lr_variational=4.8, loc_std=0.5, prior_scale=0.1, weight_decay=5e-4),
}
"""The paper's Table 2, per (data set, network): lambda_0 0.05 / 0.05 / 0.1 / 0.1, lambda_1 1.2 / 1.6 / 2.4 / 4.8,
S = 2, mu init N(1, 0.75^2) for VGG16 and N(1, 0.5^2) for WRN, prior N(1, 0.3^2) for VGG16 and N(1, 0.1^2) for WRN,
weight decay 5e-4 except 3e-4 for VGG16 on CIFAR-100."""

CIFAR_PRIOR_SCALE = {"vgg16": 0.3, "wrn28x10": 0.1}
"""The authors' node-noise prior N(1, s^2) per network (Table 2's prior row)."""


def cifar_specs(profile: Profile, seed: int, data_dirs: dict[str, str]) -> list[RunSpec]:
    """The paper's CIFAR cells: node noise (the authors' setting, :data:`CIFAR_TABLE_2` per cell) and the
    deterministic network, one seed.

    Node noise: ``mixture:4,loc_std=sigma_0`` with bias noise, prior N(1, s^2), S = 2 copies per example, SGD
    Nesterov at lambda_0 (weights, the cell's weight decay, decayed to 1 % between 50 % and 90 % of training) and
    lambda_1 (variational, constant), the KL weight rising linearly over the first two thirds of the epochs (the
    paper's 200 of 300). The deterministic network is the same SGD on the weights alone, at the cell's lambda_0 and
    weight decay (the paper gives no separate setting for its SGD row). Standardised pixels, 5 000 validation
    images, batch 128, no augmentation (the authors crop and flip; the library has no augmentation yet).
    """
    specs = []
    for dataset, model in profile["cifar"]:
        cell = CIFAR_TABLE_2[(dataset, model)]
        epochs = profile["cifar_epochs"]
        base = RunConfig(
            dataset=dataset,
            model=model,
            epochs=epochs,
            batch_size=128,
            optimizer="sgd",
            lr=cell.lr,
            weight_decay=cell.weight_decay,
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
                guide=f"mixture:4,loc_std={cell.loc_std:g}",
                prior=f"normal:1,{cell.prior_scale:g}",
                lr_variational=cell.lr_variational,
                samples_per_example=cell.samples,
                kl_anneal=f"linear:{2 * epochs // 3}",
                num_samples=4 * profile["samples_per_component"],
            ),
            "deterministic": replace(base, guide="mle", num_samples=1),
        }
        for method, config in methods.items():
            specs.append(
                RunSpec(
                    config,
                    label=f"{dataset}-{model}-{method}-s{seed}",
                    tags=run_tags(part="cifar", dataset=dataset, model=model, method=method, seed=seed),
                )
            )
    return specs
