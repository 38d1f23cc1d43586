"""Which family each command-line option uses, and the help text and ``pyro-bnn list`` made from them.

This module imports every family's module (priors, guides, models, ...), so it sits above them all and only the CLI
imports it; ``pyro_bnn.spec`` itself imports nothing of the package.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from pyro_bnn.data import DatasetName, Normalization, Task
from pyro_bnn.data.corruptions import CORRUPTION_FAMILY, parse_corruption
from pyro_bnn.guides.spec import DEFAULT_GUIDE, GUIDE_FAMILY, parse_guide
from pyro_bnn.infer.annealing import KL_SCHEDULE_FAMILY, parse_kl_schedule
from pyro_bnn.infer.kl_weighting import KLWeighting
from pyro_bnn.infer.lr_schedules import LR_SCHEDULE_FAMILY
from pyro_bnn.infer.objective_registry import objective_entries
from pyro_bnn.infer.objectives import ElboKind
from pyro_bnn.infer.optim import OptimizerKind
from pyro_bnn.likelihoods import KLScale
from pyro_bnn.models.registry import MODEL_FAMILY, parse_model_spec
from pyro_bnn.nn.activations import ACTIVATION_FAMILY, parse_activation
from pyro_bnn.priors.spec import PRIOR_FAMILY, parse_prior
from pyro_bnn.spec.grammar import Family, Form


@dataclass(frozen=True)
class Option:
    """A command-line option whose value is a spec of ``family``.

    Attributes:
        flag: The option, e.g. ``--prior``.
        family: Its grammar.
        title: What it chooses, for ``--help`` and the heading in ``pyro-bnn list``.
        build: The public function that turns a spec into its object (``parse_prior``), or None when the
            family's own parse is all there is (the plain enum options).
        choices: Whether argparse should refuse other values itself (plain enum options whose values are
            matched exactly; not the data set, whose names are also matched case-insensitively and by alias).
        command: The ``pyro-bnn`` command that takes it.
    """

    flag: str
    family: Family
    title: str
    build: Callable[[str], object] | None = None
    choices: bool = False
    command: str = "train"

    @property
    def field(self) -> str:
        """The ``RunConfig`` field (or argparse destination) it sets: ``--kl-anneal`` -> ``kl_anneal``."""
        return self.flag.removeprefix("--").replace("-", "_")

    def parse(self, spec: str) -> object:
        """What the option's value becomes: ``build(spec)``, or the enum member for a plain enum option."""
        return self.build(spec) if self.build is not None else self.family.parse(spec).kind

    def help(self, default: object = None) -> str:
        """The argparse help, e.g. ``"weight prior: normal[:LOC,SCALE] | ... (default normal:0,1; details: pyro-bnn
        list)"``, with ``%`` escaped for argparse."""
        tail = "details: pyro-bnn list" if default is None else f"default {default}; details: pyro-bnn list"
        return f"{self.title}: {self.family.usages(' | ')} ({tail})".replace("%", "%%")


def _dataset_note(member: DatasetName) -> str:
    return "regression" if member.task is Task.REGRESSION else ""


def _elbo_forms() -> list[Form]:
    """Every registered objective: the built-in ones (:class:`ElboKind`) in their order, then any other."""
    builtin = {member.value: member for member in ElboKind}
    entries = sorted(
        objective_entries(), key=lambda e: list(builtin).index(e.name) if e.name in builtin else len(builtin)
    )
    return [Form(builtin[e.name]) if e.name in builtin else Form(e.name, doc=e.doc) for e in entries]


ELBO_FAMILY = Family("ELBO", _elbo_forms, example=ElboKind.AUTO.value)
"""The ``--elbo`` grammar: every objective of :mod:`pyro_bnn.infer.objective_registry`."""


OPTIONS: tuple[Option, ...] = (
    Option(
        "--dataset",
        Family.of_enum(DatasetName, "dataset", note=_dataset_note, example="fashion-mnist"),
        "data set",
        build=DatasetName,
    ),
    Option("--model", MODEL_FAMILY, "network", build=parse_model_spec),
    Option(
        "--activation",
        ACTIVATION_FAMILY,
        "hidden activation (default: the model's own, tanh for tanh-small and tanh-cnn, relu for the others)",
        build=parse_activation,
    ),
    Option(
        "--prior",
        PRIOR_FAMILY,
        "prior of the weights (of the noise with --node-noise; default normal:0,1, or normal:1,0.1)",
        build=parse_prior,
    ),
    Option(
        "--guide",
        GUIDE_FAMILY,
        f"variational family (default {DEFAULT_GUIDE}, or mixture:4 with --node-noise)",
        build=parse_guide,
    ),
    Option("--elbo", ELBO_FAMILY, "ELBO estimator", choices=True),
    Option(
        "--optimizer",
        Family.of_enum(OptimizerKind, "optimizer"),
        "optimiser (default adam, or sgd with --node-noise)",
        choices=True,
    ),
    Option(
        "--lr-schedule",
        LR_SCHEDULE_FAMILY,
        "learning-rate schedule of the model's parameters (--lr-variational-schedule: the guide's, same forms)",
    ),
    Option("--kl-anneal", KL_SCHEDULE_FAMILY, "KL annealing schedule", build=parse_kl_schedule),
    Option("--kl-weighting", Family.of_enum(KLWeighting, "KL weighting"), "minibatch KL weighting", choices=True),
    Option("--kl-scale", Family.of_enum(KLScale, "KL scale"), "data term vs KL per step", choices=True),
    Option("--normalization", Family.of_enum(Normalization, "normalization"), "image scaling", choices=True),
    Option(
        "--corruption",
        CORRUPTION_FAMILY,
        "input corruption (classification runs only)",
        build=parse_corruption,
        command="evaluate",
    ),
)
"""Every option whose value names a choice, in the order ``pyro-bnn list`` shows them."""

LABEL_WIDTH = 36
"""Usage column width in ``pyro-bnn list``; a longer usage pushes its description right."""

_BY_FLAG = {option.flag: option for option in OPTIONS}


def option(flag: str) -> Option:
    """The option called ``flag`` (``"--prior"``)."""
    return _BY_FLAG[flag]


def listing(name: str | None = None) -> str:
    """The text of ``pyro-bnn list``: per option a heading, then one line per name with its usage grammar, a
    short description (its first sentence, cut at 90 characters) and the placeholders' meaning and defaults.

    Args:
        name: One option (``guide``, ``kl_anneal``, ``kl-anneal``; ``--guide`` from Python): its block only, each
            form's usage on a line of its own and its whole first paragraph below it, wrapped.

    Raises:
        ValueError: ``name`` is no option of the listing (one line naming them).
    """
    if name is not None:
        return _full_block(_named(name))
    blocks = [
        "Option strings are NAME or NAME:ARG,...; [...] is optional, names ignore case. Descriptions are cut to a "
        "line; pyro-bnn list OPTION (e.g. pyro-bnn list guide) prints them whole."
    ]
    for entry in OPTIONS:
        forms = entry.family.forms
        width = min(max(len(form.label) for form in forms), LABEL_WIDTH)
        command = "" if entry.command == "train" else f"pyro-bnn {entry.command} "
        lines = [f"\n{command}{entry.flag}: {entry.title}"]
        for form in forms:
            text = form.description
            if form.legend:
                text = f"{text} ({form.legend})" if text else form.legend
            lines.append(f"  {form.label:<{width}}  {text}".rstrip())
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def _named(name: str) -> Option:
    flag = "--" + name.strip().lower().removeprefix("--").replace("_", "-")
    if flag not in _BY_FLAG:
        known = ", ".join(entry.flag.removeprefix("--") for entry in OPTIONS)
        raise ValueError(f"unknown option {name!r}; one of {known}")
    return _BY_FLAG[flag]


def _full_block(entry: Option) -> str:
    """One option's block with each form's whole description, wrapped under its usage."""
    command = "" if entry.command == "train" else f"pyro-bnn {entry.command} "
    lines = [f"{command}{entry.flag}: {entry.title}"]
    for form in entry.family.forms:
        lines.append(f"\n  {form.label}")
        text = " ".join(part for part in (form.full_description, form.legend and f"({form.legend})") if part)
        lines.extend(textwrap.wrap(text, width=116, initial_indent="    ", subsequent_indent="    "))
    return "\n".join(lines)
