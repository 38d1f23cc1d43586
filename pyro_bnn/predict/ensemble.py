"""Deep ensembles as a parameter source: M independently trained point networks, predicted as an equal mixture.

An :class:`Ensemble` holds M members of one architecture, each a *point network*: a deterministic network (no
random site, every weight a module parameter, as ``--guide mle`` trains) or a point estimate of the sites (a MAP
network, any guide's median) together with the module parameters that stay deterministic. Sample i of a prediction
is member ``i mod M``, so S = M (the default) gives each member once and the usual mean over samples is the equally
weighted mixture: the same :class:`~pyro_bnn.predict.Prediction`, metrics, entropy split and OOD scores as a BNN.

The members' weights enter :func:`~pyro_bnn.predict.predict` through the ensemble's own model,
:attr:`Ensemble.bnn`: a copy of the shared architecture in which every tensor that differs between members (module
parameters, weight sites, floating-point buffers such as batch-norm statistics) is a site. ``predict`` then runs
all members of a chunk in one vectorised call, the same ``torch.vmap`` over ``functional_call`` that it uses for a
BNN's weight samples, so deterministic module parameters need no second code path. That model is for prediction
only: its prior has no distribution (nothing samples it).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping, Sequence

import torch
from pyro.distributions import Distribution
from torch import nn

from pyro_bnn.bnn import BNN, _forget_conversion
from pyro_bnn.checks import positive_int
from pyro_bnn.predict.sources import ParameterSource, _check_values
from pyro_bnn.priors.base import ParameterSite, Prior
from pyro_bnn.priors.selection import nothing

Member = BNN | tuple[BNN, object]
"""A BNN without random sites, or ``(bnn, point)`` with ``point`` a ``{site: param_shape}`` dict or a trained guide
with ``median()``."""


class _MemberTensors(Prior):
    """The ensemble model's "prior": it makes the named tensors (parameters or buffers) sites and has no
    distribution, since the model only replays its members' values."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(select=nothing)
        self.names = list(names)

    def parameter_sites(self, net: nn.Module) -> list[ParameterSite]:
        sites = []
        for name in self.names:
            layer, _, attr = name.rpartition(".")
            sites.append(ParameterSite(name, layer, attr, _tensor(net, name).shape))
        return sites

    def distribution(self, site: ParameterSite, hyper: Mapping[str, torch.Tensor]) -> Distribution:
        raise ValueError("an ensemble's model only predicts from its members' weights; it has no prior to sample")


class Ensemble(ParameterSource):
    """M point networks of one architecture; sample i is member ``i mod M`` (see the module docstring).

    Build one with :meth:`from_networks` or :func:`pyro_bnn.runs.ensemble.load_ensemble` and predict with
    its own model: ``predict(ensemble.bnn, ensemble, data)``.

    Attributes:
        bnn: The ensemble's model: the members' architecture with every tensor that differs between them as a site
            (a tensor that all members hold equal stays a plain one, shared by every sample).
        members: ``{site name: (M, *shape)}``, the members' values of those sites, stacked.
        num_members: M.
    """

    def __init__(self, bnn: BNN, members: Mapping[str, torch.Tensor], num_members: int) -> None:
        num_members = positive_int(num_members, "num_members")
        bad = {name: tuple(v.shape) for name, v in members.items() if v.dim() == 0 or v.shape[0] != num_members}
        if bad:
            name = next(iter(bad))
            raise ValueError(f"member values of {name!r} have shape {bad[name]}; expected ({num_members}, ...)")
        self.bnn = bnn
        self.members = dict(members)
        self.num_members = num_members

    @classmethod
    def from_networks(cls, members: Sequence[Member]) -> Ensemble:
        """The ensemble of in-memory point networks of one architecture.

        Args:
            members: M >= 1 members, each a :class:`~pyro_bnn.BNN` without random sites (a deterministic network)
                or a pair ``(bnn, point)`` where ``point`` is ``{site name: param_shape}`` or a trained guide with
                ``median()`` (a MAP guide, or any guide's posterior median). The first member's likelihood is the
                ensemble's.

        Raises:
            ValueError: no member; a member that is no point network (random sites without point values, or
                per-example latents); architectures that differ (one line naming the first differing module,
                tensor, shape or dtype).
        """
        if isinstance(members, BNN):
            raise ValueError("from_networks takes a sequence of members, e.g. [bnn_a, bnn_b], not one BNN")
        members = list(members)
        if not members:
            raise ValueError("an ensemble needs at least one member, got none")
        states = [_member_state(i, member) for i, member in enumerate(members)]
        nets = [bnn.net for bnn, _ in states]
        _check_same_architecture([bnn for bnn, _ in states], [values for _, values in states])
        names = list(states[0][1])
        varying = [
            name
            for name in names
            if states[0][1][name].is_floating_point()
            and any(not torch.equal(values[name], states[0][1][name]) for _, values in states[1:])
        ]
        template = copy.deepcopy(nets[0])
        _forget_conversion(template)  # its members' stand-in buffers are what the ensemble's sites replace
        with torch.no_grad():
            for name, value in states[0][1].items():
                _tensor(template, name).copy_(value)  # the shared tensors hold member 0's (point) values
        first = states[0][0]
        bnn = BNN(template, _MemberTensors(varying), copy.deepcopy(first.likelihood))
        bnn.train(first.training)
        stacked = {name: torch.stack([values[name].detach() for _, values in states]) for name in varying}
        return cls(bnn, stacked, len(members))

    def default_num_samples(self) -> int:
        """M: each member once."""
        return self.num_members

    def check_num_samples(self, num_samples: int) -> None:
        """Warns where S is no multiple of M: sample i is member ``i mod M``, so the members would weigh unequally
        in the mixture."""
        if num_samples % self.num_members:
            counts = sorted({num_samples // self.num_members, -(-num_samples // self.num_members)}, reverse=True)
            warnings.warn(
                f"num_samples={num_samples} is no multiple of the ensemble's {self.num_members} members: they weigh "
                f"{' or '.join(map(str, counts))} of {num_samples} in the mixture, not equally; pass a multiple of "
                f"{self.num_members} (the default, None, is {self.num_members})",
                stacklevel=3,
            )

    def prepare(self, bnn: BNN, x: torch.Tensor) -> None:
        """Checks that ``bnn`` is the ensemble's own model (:attr:`bnn`); any other would ignore the members."""
        if bnn is not self.bnn:
            raise ValueError(
                "predict an Ensemble with its own model: predict(ensemble.bnn, ensemble, data) "
                "(load_ensemble returns it first)"
            )
        _check_values(bnn, self.members, leading=1)

    def point(self, bnn: BNN, x: torch.Tensor) -> None:
        """None: an ensemble has no point network. The element-wise average of independently trained members'
        weights is a network nobody trained (their hidden units are permuted against each other), so
        ``predict(..., point=True)`` leaves :attr:`Prediction.point` None."""
        return None

    def draw_globals(self, bnn: BNN, start: int, num_samples: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Members ``start .. start + num_samples`` (modulo M) of every site, ``{name: (S, 1, *shape)}``."""
        index = torch.arange(start, start + num_samples) % self.num_members
        return {name: self.members[name][index].unsqueeze(1).to(x.device) for name in bnn.site_names}

    def draw_locals(self, bnn, globals_, num_samples, x):
        return None


def _member_state(index: int, member: Member) -> tuple[BNN, dict[str, torch.Tensor]]:
    """A member's model and the value of every tensor of its network, ``{name: tensor}`` (its point values at the
    weight sites, its own parameters and buffers elsewhere)."""
    if isinstance(member, nn.Module) and not isinstance(member, BNN):
        raise ValueError(
            f"ensemble member {index} is a plain {type(member).__name__}; make it a point network first: "
            "BNN(net, NormalPrior(select=nothing), likelihood)"
        )
    bnn, point = (member, None) if not isinstance(member, (tuple, list)) else (tuple(member) + (None,))[:2]
    if not isinstance(bnn, BNN):
        raise ValueError(f"ensemble member {index} is a {type(bnn).__name__}, not a pyro_bnn BNN (or (bnn, point))")
    if bnn.local_latents:
        raise ValueError(f"ensemble member {index} has per-example latents {bnn.local_site_names}; not a point network")
    if point is not None and not isinstance(point, Mapping):
        median = getattr(point, "median", None)
        if not callable(median):
            raise ValueError(f"ensemble member {index}'s point is a {type(point).__name__}: no dict and no median()")
        point = median()
    point = dict(point or {})
    missing = [name for name in bnn.site_names if name not in point]
    if missing:
        raise ValueError(
            f"ensemble member {index} has random sites without point values ({missing[:3]}); "
            "pass (bnn, guide) or (bnn, {site: value})"
        )
    values = dict(bnn.net.named_parameters())
    values.update(bnn.net.named_buffers())
    for site in bnn.sites:
        if tuple(point[site.name].shape) != tuple(site.shape):
            raise ValueError(
                f"ensemble member {index}'s point value of {site.name!r} has shape "
                f"{tuple(point[site.name].shape)}; expected {tuple(site.shape)}"
            )
        values[site.name] = point[site.name]
    return bnn, {name: value.detach() for name, value in values.items()}


def _check_same_architecture(bnns: Sequence[BNN], values: Sequence[Mapping[str, torch.Tensor]]) -> None:
    """Raises one line naming the first module, tensor, shape or dtype in which a member differs from member 0."""
    reference = [(name, type(module)) for name, module in bnns[0].net.named_modules()]
    for i, bnn in enumerate(bnns[1:], start=1):
        if type(bnn.likelihood) is not type(bnns[0].likelihood):
            raise ValueError(
                f"ensemble member {i} has a {type(bnn.likelihood).__name__} likelihood, member 0 a "
                f"{type(bnns[0].likelihood).__name__}"
            )
        modules = [(name, type(module)) for name, module in bnn.net.named_modules()]
        for (name0, type0), (name, kind) in zip(reference, modules, strict=False):
            if (name0, type0) != (name, kind):
                raise ValueError(
                    f"ensemble member {i}'s network differs from member 0's: module {name or '<root>'!r} is a "
                    f"{kind.__name__}, member 0 has {name0 or '<root>'!r} a {type0.__name__}"
                )
        if len(modules) != len(reference):
            raise ValueError(f"ensemble member {i}'s network has {len(modules)} modules, member 0's {len(reference)}")
        for name in list(values[0]) + [n for n in values[i] if n not in values[0]]:
            if name not in values[i] or name not in values[0]:
                which = i if name not in values[i] else 0
                raise ValueError(f"ensemble member {which}'s network has no tensor {name!r}; the other one has")
            a, b = values[0][name], values[i][name]
            if a.shape != b.shape or a.dtype != b.dtype:
                raise ValueError(
                    f"ensemble member {i}'s tensor {name!r} is {tuple(b.shape)} {b.dtype}; member 0's is "
                    f"{tuple(a.shape)} {a.dtype}"
                )


def _tensor(net: nn.Module, name: str) -> torch.Tensor:
    """The parameter or buffer ``name`` (dotted) of ``net``."""
    layer, _, attr = name.rpartition(".")
    return getattr(net.get_submodule(layer), attr)


__all__ = ["Ensemble"]
