"""Forms and families: the grammar of option strings such as ``"mixture:0.5,1,0.0025"``, declared once.

An option string is ``NAME`` or ``NAME:ARG,ARG,...``: the name is case-insensitive, surrounding whitespace is
ignored, and after the positional arguments a form may take ``key=value`` options
(``autonormal:0.01,loc=median``). A :class:`Form` declares one name: its positional arguments (each an
:class:`Arg` with a value type from :mod:`pyro_bnn.spec.values`, optional ones at the end with defaults), its
options, and a ``check`` for rules across arguments. A :class:`Family` is every form one option accepts (the CLI's
``--prior``), one per member of a ``str`` enum. Usage strings (``mixture[:PI,SIGMA1,SIGMA2]``), error messages,
the CLI's help and ``pyro-bnn list`` are all generated from these declarations, so a name cannot be listed without
being parsed and checked, and a new enum member without a form fails at import.

Parsing returns a :class:`ParsedSpec` (the form, the enum member and every argument's value, defaults filled in);
the module that owns the family builds its object from it. Every error is a :class:`SpecError`, a ``ValueError``
whose message is one line naming the spec and what was expected. :class:`Arg`, :class:`CustomArguments`,
:class:`ParsedSpec` and :class:`SpecError` are defined in :mod:`pyro_bnn.spec.arguments` and importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from pyro_bnn.spec.arguments import Arg, CustomArguments, ParsedSpec, SpecError
from pyro_bnn.spec.docs import first_paragraph, member_doc, summary
from pyro_bnn.spec.values import ArgumentError


@dataclass(frozen=True)
class Form:
    """One name of a family and its grammar.

    Attributes:
        kind: The enum member it stands for, or the registered name (the model registry).
        args: Positional arguments; those with defaults come last and are given all together or not at all,
            so ``normal`` takes 0 or 2 numbers and ``cyclical`` 1 or 2.
        options: ``key=value`` options after the positional arguments, each optional.
        aliases: Other names accepted for it (``identity`` for ``linear``).
        check: Rules across arguments: raises ``ValueError`` with a clause (``"give X or Y, not both"``).
        custom: A function reading the arguments instead of ``args``/``options``.
        example: A spec with arguments, for the docs and the round-trip test (default: the bare name).
        doc: Its description; default the enum member's docstring (``pyro_bnn.spec.docs.member_doc``).
        note: A word shown after the usage in listings (``"regression"``).
    """

    kind: Enum | str
    args: tuple[Arg, ...] = ()
    options: tuple[Arg, ...] = ()
    aliases: tuple[str, ...] = ()
    check: Callable[[ParsedSpec], None] | None = None
    custom: CustomArguments | None = None
    example: str | None = None
    doc: str | None = None
    note: str = ""

    def __post_init__(self) -> None:
        required = [arg.required for arg in self.args]
        if required != sorted(required, reverse=True):
            raise TypeError(f"form {self.name!r}: optional positional arguments must follow the required ones")
        if any(option.required for option in self.options):
            raise TypeError(f"form {self.name!r}: every key=value option needs a default")
        if self.custom is not None and (self.args or self.options):
            raise TypeError(f"form {self.name!r}: custom arguments exclude declared ones")

    @property
    def name(self) -> str:
        """The canonical name (the enum value)."""
        return self.kind.value if isinstance(self.kind, Enum) else str(self.kind)

    @property
    def counts(self) -> tuple[int, ...]:
        """The accepted numbers of positional arguments."""
        return tuple(sorted({sum(arg.required for arg in self.args), len(self.args)}))

    @property
    def takes_arguments(self) -> bool:
        return bool(self.args or self.options or self.custom)

    @property
    def description(self) -> str:
        """One plain sentence: :attr:`doc`, else the enum member's docstring."""
        if self.doc is not None:
            return summary(self.doc)
        return summary(member_doc(self.kind)) if isinstance(self.kind, Enum) else ""

    @property
    def full_description(self) -> str:
        """The first paragraph of :attr:`doc` (else the enum member's docstring), uncut."""
        if self.doc is not None:
            return first_paragraph(self.doc)
        return first_paragraph(member_doc(self.kind)) if isinstance(self.kind, Enum) else ""

    def _positional_usage(self, bracket_first: bool) -> str:
        required = [arg.placeholder for arg in self.args if arg.required]
        optional = [arg.placeholder for arg in self.args if not arg.required]
        text = ",".join(required)
        if optional:
            if required:
                text += "[," + ",".join(optional) + "]"
            else:
                text = ("[" + ",".join(optional) + "]") if bracket_first else ",".join(optional)
        return text

    def _options_usage(self) -> str:
        return "".join(f"[,{option.name}={option.placeholder}]" for option in self.options)

    @property
    def usage(self) -> str:
        """Every string this form accepts, e.g. ``normal[:LOC,SCALE]``, ``cyclical:PERIOD[,RAMP_FRACTION]``,
        ``autonormal[:INIT_SCALE][,rel=C][,loc=network|median|map][,map_epochs=N]``, ``mlp[:W1,W2,...]``."""
        if self.custom is not None:
            return f"{self.name}[:{self.custom.usage}]"
        if not self.takes_arguments:
            return self.name
        if any(arg.required for arg in self.args):
            return f"{self.name}:{self._positional_usage(True)}{self._options_usage()}"
        if self.args:
            return f"{self.name}[:{self._positional_usage(False)}]{self._options_usage()}"
        return f"{self.name}[:{self._options_usage()[2:]}"

    @property
    def label(self) -> str:
        """The usage with the note and the aliases: ``cubic (regression)``, ``linear (or identity)``."""
        note = f" ({self.note})" if self.note else ""
        aliases = f" (or {', '.join(self.aliases)})" if self.aliases else ""
        return self.usage + note + aliases

    @property
    def usage_with_arguments(self) -> str:
        """The form as written with its arguments, for messages about them: ``normal:LOC,SCALE``."""
        if self.custom is not None:
            return f"{self.name}:{self.custom.usage}"
        if self.args and not self.options and not any(arg.required for arg in self.args):
            return f"{self.name}:{self._positional_usage(False)}"
        return self.usage

    @property
    def defaults(self) -> str:
        """The defaults of the arguments that have one, e.g. ``LOC=0, SCALE=1`` ("" when none)."""
        shown = []
        for arg in (*self.args, *self.options):
            if not arg.required and arg.default is not None:
                value = arg.default.value if isinstance(arg.default, Enum) else arg.default
                label = arg.placeholder if arg in self.args else arg.name
                shown.append(f"{label}={value:g}" if isinstance(value, float) else f"{label}={value}")
        return ", ".join(shown)

    @property
    def legend(self) -> str:
        """What the placeholders stand for where the usage does not show it, and the defaults:
        ``FAMILY: normal|laplace|cauchy; default LOC=0, SCALE=1``."""
        parts = [
            f"{arg.metavar}: {arg.type.metavar(arg.name)}"
            for arg in (*self.args, *self.options)
            if arg.metavar and arg.metavar != arg.type.metavar(arg.name) and not arg.type.numeric
        ]
        if self.defaults:
            parts.append(f"default {self.defaults}")
        return "; ".join(parts)

    def parse(self, spec: str, raw: list[str], family: Family) -> ParsedSpec:
        what = family.what
        if not self.takes_arguments:
            if raw:
                hint = f"; {family.no_arguments_hint}" if family.no_arguments_hint else ""
                raise SpecError(f"{what} {self.name!r} takes no arguments after ':', got {spec!r}{hint}")
            return ParsedSpec(spec, self)
        if self.custom is not None:
            if not raw:
                return ParsedSpec(spec, self)
            try:
                values = dict(self.custom.parse(raw))
            except ValueError as err:
                raise SpecError(f"{what} {spec!r}: {err}; expected {self.usage_with_arguments}") from None
            return ParsedSpec(spec, self, values, frozenset(values))
        positional, given_options = self._split_options(spec, raw, what)
        if len(positional) not in self.counts:
            expected = " or ".join(str(count) for count in self.counts)
            numeric = "numeric " if all(arg.type.numeric for arg in self.args) else ""
            raise SpecError(
                f"{what} {spec!r} takes {expected} {numeric}argument(s), got {len(positional)}; "
                f"expected {self.usage_with_arguments}"
            )
        values: dict[str, object] = {}
        for arg, text in zip(self.args, positional, strict=False):
            values[arg.name] = self._read(arg, text, spec, what)
        for arg in self.args[len(positional) :]:
            values[arg.name] = arg.default
        for option in self.options:
            text = given_options.get(option.name)
            values[option.name] = option.default if text is None else self._read(option, text, spec, what)
        given = frozenset([arg.name for arg in self.args[: len(positional)]] + list(given_options))
        parsed = ParsedSpec(spec, self, values, given)
        if self.check is not None:
            try:
                self.check(parsed)
            except ValueError as err:
                raise SpecError(f"{what} {spec!r}: {err}") from None
        return parsed

    def _read(self, arg: Arg, text: str, spec: str, what: str) -> object:
        try:
            return arg.type.parse(text, arg.name)
        except ArgumentError as err:
            usage = f"; expected {self.usage_with_arguments}" if err.show_usage else ""
            raise SpecError(f"{what} {spec!r}: {err}{usage}") from None

    def _split_options(self, spec: str, raw: list[str], what: str) -> tuple[list[str], dict[str, str]]:
        if not self.options:
            # key=value where the form takes none: say so, rather than count it as one more positional argument.
            for arg in raw:
                key, sep, _ = arg.partition("=")
                if sep:
                    raise SpecError(
                        f"{what} {spec!r}: unknown option {key.strip().lower()!r}; {self.name} takes no key=value "
                        f"options; expected {self.usage_with_arguments}"
                    )
            return raw, {}
        known = [option.name for option in self.options]
        positional: list[str] = []
        options: dict[str, str] = {}
        for arg in raw:
            key, sep, value = arg.partition("=")
            if not sep:
                if options:
                    raise SpecError(f"{what} {spec!r}: positional argument {arg!r} after a key=value option")
                positional.append(arg)
                continue
            key = key.strip().lower()
            if key not in known:
                raise SpecError(f"{what} {spec!r}: unknown option {key!r}; expected one of {', '.join(known)}")
            if key in options:
                raise SpecError(f"{what} {spec!r}: option {key!r} given twice")
            options[key] = value.strip()
        return positional, options


def _article(what: str) -> str:
    return "an" if what[:1].lower() in "aeio" else "a"


class Family:
    """Every form one option accepts.

    Args:
        what: What messages call the option (``"prior"``, ``"KL schedule"``).
        forms: The forms, or a function returning them (read on every use, for a registry that grows).
        enum: The ``str`` enum the forms stand for: each member must have exactly one form.
        example: A typical spec, quoted by the message for an empty one.
        allow_empty_args: Whether ``"name:"`` (nothing after the colon) means the bare name; if False the colon
            announces an argument, and ``"tanh:"`` is an error.
        no_arguments_hint: Added to the message for arguments given to a form that takes none.

    Raises:
        TypeError: A member of ``enum`` without a form, a form of another enum, or a name used twice.
    """

    def __init__(
        self,
        what: str,
        forms: Iterable[Form] | Callable[[], Iterable[Form]],
        *,
        enum: type[Enum] | None = None,
        example: str,
        allow_empty_args: bool = True,
        no_arguments_hint: str = "",
    ) -> None:
        self.what = what
        self.enum = enum
        self.example = example
        self.allow_empty_args = allow_empty_args
        self.no_arguments_hint = no_arguments_hint
        self._source = forms if callable(forms) else tuple(forms)
        self._static_index = None if callable(forms) else self._index(self._source)

    @classmethod
    def of_enum(
        cls, enum: type[Enum], what: str, *, note: Callable[[Enum], str] | None = None, example: str | None = None
    ) -> Family:
        """A family of bare names, one per member of ``enum`` (``--elbo trace``)."""
        forms = [Form(member, note=note(member) if note else "") for member in enum]
        return cls(what, forms, enum=enum, example=example or next(iter(enum)).value)

    def _index(self, forms: Sequence[Form]) -> dict[str, Form]:
        index: dict[str, Form] = {}
        for form in forms:
            if self.enum is not None and not isinstance(form.kind, self.enum):
                raise TypeError(f"{self.what} form {form.name!r} is not a member of {self.enum.__name__}")
            for name in (form.name, *form.aliases):
                if name != name.strip().lower() or ":" in name or not name:
                    raise TypeError(f"{self.what} name {name!r} must be lower case, stripped, without ':'")
                if name in index:
                    raise TypeError(f"{self.what} name {name!r} is declared twice")
                index[name] = form
        if self.enum is not None:
            missing = [member.value for member in self.enum if member not in {form.kind for form in forms}]
            if missing:
                raise TypeError(f"{self.what}: {self.enum.__name__} member(s) {missing} have no form")
        return index

    @property
    def forms(self) -> tuple[Form, ...]:
        """The forms, in declaration (or registry) order."""
        return tuple(self._source()) if callable(self._source) else self._source

    def form(self, name: str) -> Form | None:
        """The form called ``name`` (or one of its aliases), case ignored; None if there is none."""
        index = self._static_index if self._static_index is not None else self._index(self.forms)
        return index.get(name.strip().lower())

    def names(self) -> list[str]:
        """The canonical names, e.g. for argparse's ``choices``."""
        return [form.name for form in self.forms]

    def usages(self, separator: str = ", ") -> str:
        """Every form's :attr:`Form.label`: ``relu, leaky[:SLOPE], ..., linear (or identity)``."""
        return separator.join(form.label for form in self.forms)

    def parse(self, spec: object) -> ParsedSpec:
        """Parses ``spec`` against the forms.

        Raises:
            SpecError: One line naming ``spec``: not a string, an unknown name (listing every usage), a wrong
                number of arguments, an argument that is not what its form expects (with the form's usage), or a
                broken rule across arguments.
        """
        if not isinstance(spec, str) or not spec.strip():
            raise SpecError(
                f"{_article(self.what)} {self.what} must be a non-empty string like {self.example!r}, got {spec!r}"
            )
        name, colon, rest = spec.strip().partition(":")
        form = self.form(name)
        if form is None:
            where = f" (in {spec!r})" if colon else ""
            raise SpecError(f"unknown {self.what} {name.strip()!r}{where}; expected one of {self.usages()}")
        if not colon or (self.allow_empty_args and not rest.strip()):
            raw = []
        else:
            raw = [arg.strip() for arg in rest.split(",")]
        return form.parse(spec, raw, self)

    def __repr__(self) -> str:
        return f"Family({self.what!r}, {self.names()})"
