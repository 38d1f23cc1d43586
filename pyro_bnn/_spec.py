"""Kept for the modules that import :func:`enum_member` from here; option strings are parsed by
:mod:`pyro_bnn.spec`."""

from pyro_bnn.spec.values import enum_member

__all__ = ["enum_member"]
