"""A griffe extension (mkdocs.yml, mkdocstrings' ``extensions``): pyro_bnn's docstrings as Markdown.

The docstrings are Google style (``Args:``, ``Returns:``) written with a few reStructuredText habits that Markdown
would show as raw text. Each docstring is rewritten before griffe parses it; the source is not touched.

- **Sphinx roles** (``:class:`~pyro_bnn.BNN```, ``:func:`predict```, ``:meth:`Trainer.fit```) become the code span
  Sphinx would show (``~`` keeps the last name only, ``title <target>`` the title), linked to the object's API
  entry when the site documents it. Names are resolved as Sphinx would, from the docstring's own scope (``BNN`` in
  ``pyro_bnn.bnn`` is ``pyro_bnn.bnn.BNN``; ``.planned.RunRecord`` is relative to the module). The links are
  *optional* cross-references: a role naming an object the site does not render (a private helper, torch, Pyro)
  stays plain code instead of failing the strict build, since it is valid Python documentation. Cross-references
  written in the Markdown pages (``[Trainer][pyro_bnn.infer.Trainer]``) are not optional: a broken one fails
  ``mkdocs build --strict``.
- **Grouped arguments**: ``x, y: The data, ...`` in an ``Args:`` section documents several parameters at once (as
  numpydoc allows); it becomes one entry per name with the same text, so each is listed and a name that is not a
  parameter still fails the strict build.
- **Literal blocks**: ``Typical use::`` before an indented block becomes ``Typical use:`` (the indented block is a
  Markdown code block already).
- **Simple tables** (columns under ``=====  =====`` rules) become Markdown tables; a row whose first cell is empty
  continues the row above.
"""

from __future__ import annotations

import html
import re

import griffe

ROLE = re.compile(
    r":(?:py:)?(?P<role>class|func|meth|mod|data|attr|exc|obj|const|type|ref):"
    r"`(?P<body>[^`]+)`"
)
TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^>]+)>$", flags=re.DOTALL)


def _resolve(obj: griffe.Object, target: str) -> str:
    """The full path that ``target`` names from ``obj``'s scope, or ``target`` itself when it cannot be resolved."""
    if target.startswith("."):
        module = obj.module
        package = module if module.is_package else module.parent
        base = package.path if package is not None else module.path
        return f"{base}.{target.lstrip('.')}"
    head, _, rest = target.partition(".")
    try:
        full = obj.resolve(head)
    except Exception:  # griffe's NameResolutionError, or an alias whose target is outside the loaded packages
        return target
    return f"{full}.{rest}" if rest else full


ARG_SECTION = re.compile(r"^(?P<indent> *)(?:Args|Arguments|Parameters|Params|Keyword Args|Other Parameters):\s*$")
GROUPED_ITEM = re.compile(r"^(?P<names>\*{0,2}\w+(?: *, *\*{0,2}\w+)+)(?P<rest> *(?:\([^)]*\))? *:.*)$")


def split_grouped_arguments(text: str) -> str:
    """``text`` with each grouped argument entry (``a, b: text``) of its argument sections split into one per name."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        section = ARG_SECTION.match(lines[i])
        out.append(lines[i])
        i += 1
        if not section:
            continue
        item_indent = None
        while i < len(lines):
            line = lines[i]
            indent = len(line) - len(line.lstrip(" "))
            ended = indent <= len(section["indent"]) or (item_indent is not None and indent < item_indent)
            if line.strip() and ended:
                break
            if not line.strip() or (item_indent is not None and indent > item_indent):
                out.append(line)  # a blank or continuation line of the previous item
                i += 1
                continue
            item_indent = indent
            # one item: its first line and its continuation lines
            item = [line]
            i += 1
            while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip(" ")) > item_indent:
                item.append(lines[i])
                i += 1
            grouped = GROUPED_ITEM.match(line[item_indent:])
            if not grouped:
                out.extend(item)
                continue
            for name in re.split(r" *, *", grouped["names"]):
                out.append(" " * item_indent + name + grouped["rest"])
                out.extend(item[1:])
    return "\n".join(out)


def convert(text: str, obj: griffe.Object) -> str:
    """``text`` with every Sphinx role replaced by an optional cross-reference around a code span."""

    def replace(match: re.Match) -> str:
        body = match["body"].strip()
        titled = TITLED.match(body)
        if titled:
            title, target = titled["title"], titled["target"].strip()
        else:
            target = body.lstrip("!")
            title = target.removeprefix("~").split(".")[-1] if target.startswith("~") else target.lstrip(".")
        target = target.lstrip("~!")
        identifier = _resolve(obj, target)
        code = f"<code>{html.escape(title)}</code>"
        return f'<autoref identifier="{html.escape(identifier)}" optional>{code}</autoref>'

    return ROLE.sub(replace, text)


TABLE_RULE = re.compile(r"^ *=+(?: +=+)+ *$")


def literal_blocks(text: str) -> str:
    """``text::`` at the end of a line becomes ``text:``, ``text ::`` becomes ``text``, ``::`` alone goes (as in
    Sphinx); directives (``.. math::``) are left as they are."""
    out = []
    for line in text.split("\n"):
        if line.endswith("::") and not line.lstrip().startswith(".. "):
            line = line[:-2].rstrip() if line[:-2].strip() == "" or line[:-2].endswith(" ") else line[:-1]
        out.append(line)
    return "\n".join(out)


def _table_rows(block: list[str], starts: list[int]) -> list[list[str]]:
    """The rows of a simple table's block, cut at the columns' start positions; continuation lines joined."""
    rows: list[list[str]] = []
    for line in block:
        if not line.strip():
            continue
        ends = [*starts[1:], max(len(line), starts[-1])]
        row = [line[start:end].strip() for start, end in zip(starts, ends, strict=True)]
        if rows and not row[0]:
            rows[-1] = [f"{above} {more}".strip() for above, more in zip(rows[-1], row, strict=True)]
        else:
            rows.append(row)
    return rows


def simple_tables(text: str) -> str:
    """reStructuredText simple tables (top rule, header, rule, rows, bottom rule) as Markdown tables."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        rules = [k for k in range(i, len(lines)) if TABLE_RULE.match(lines[k])][:3]
        if len(rules) < 3 or rules[0] != i:
            out.append(lines[i])
            i += 1
            continue
        starts = [match.start() for match in re.finditer(r"=+", lines[i])]
        header = _table_rows(lines[rules[0] + 1 : rules[1]], starts)
        body = _table_rows(lines[rules[1] + 1 : rules[2]], starts)
        indent = " " * starts[0]
        for k, row in enumerate(header + body):
            out.append(indent + "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
            if k == len(header) - 1:
                out.append(indent + "|" + "---|" * len(starts))
        i = rules[2] + 1
    return "\n".join(out)


def to_markdown(text: str, obj: griffe.Object) -> str:
    """The docstring ``text`` of ``obj`` with every rewrite above applied."""
    # tables first: their columns are character positions in the text as written
    return literal_blocks(split_grouped_arguments(convert(simple_tables(text), obj)))


class DocstringConventions(griffe.Extension):
    """Rewrites every docstring of a package once the whole package is loaded (so names resolve)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        seen: set[int] = set()

        def visit(obj: griffe.Object) -> None:
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = to_markdown(obj.docstring.value, obj)
            for member in obj.members.values():
                if not member.is_alias:
                    visit(member)

        visit(pkg)
