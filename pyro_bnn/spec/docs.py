"""The docstring of each enum member, read from its source, as one plain-text sentence for help and listings.

Enum members document themselves the way attributes do, with a string right under the assignment::

    class PriorKind(str, Enum):
        NORMAL = "normal"
        \"\"\"Normal(LOC, SCALE^2) on every selected weight.\"\"\"

Python keeps no such string at run time, so :func:`member_doc` reads it from the class's source (once per class).
Where the source cannot be read (a frozen install) the description is empty and listings show the usage alone.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import textwrap
from enum import Enum

_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bal)\.(?:\s+|$)")

MAX_SUMMARY = 90
"""Longest summary in characters; a longer first sentence is cut at a word and ends in '...'."""


@functools.cache
def _attribute_docs(cls: type) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for node, following in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.targets[0].id] = inspect.cleandoc(following.value.value)
    return docs


def member_doc(member: Enum) -> str:
    """The docstring written under ``member``'s assignment in its enum class ("" if there is none)."""
    return _attribute_docs(type(member)).get(member.name, "")


def plain(text: str) -> str:
    """reStructuredText roles and literals to plain text, on one line: ``:class:`~a.B``` -> ``B``."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if "~" in m.group(0) else m.group(1), text)
    return " ".join(text.replace("``", "").split())


def first_paragraph(doc: str | None) -> str:
    """The first paragraph of ``doc`` as plain text on one line, whole (``pyro-bnn list OPTION``)."""
    return plain(inspect.cleandoc(doc).split("\n\n")[0]) if doc else ""


def summary(doc: str | None) -> str:
    """The first sentence of ``doc`` as plain text, without its final period, at most :data:`MAX_SUMMARY` long."""
    if not doc:
        return ""
    paragraph = first_paragraph(doc)
    match = _SENTENCE_END.search(paragraph)
    sentence = paragraph[: match.start()] if match else paragraph
    if len(sentence) > MAX_SUMMARY:
        sentence = sentence[: MAX_SUMMARY - 3].rsplit(" ", 1)[0].rstrip(",;:") + "..."
    return sentence
