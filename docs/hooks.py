"""MkDocs hooks (``hooks:`` in mkdocs.yml): the notebooks and the command line's own help, taken at build time.

- Every ``notebooks/*.ipynb`` becomes a page under "Notebooks" (rendered by mkdocs-jupyter as committed, not
  executed), so a notebook added to the folder is in the site without editing mkdocs.yml.
- A line ``<!-- pyro-bnn-help: ARGS -->`` in a page is replaced by what ``pyro-bnn ARGS`` prints: ``--help`` of the
  parser (``pyro_bnn.cli.build_parser``), ``list`` (the option-string catalogue) or ``reproduce --list``. The text
  comes from the code that the command runs, so the CLI page cannot go stale.
- A line ``<!-- result-file: PATH -->`` is replaced by that committed result file (e.g. a table a command wrote),
  without its title.
- A line ``<!-- notebook-list -->`` becomes a list of links to those pages, each named by its notebook's title.
- A line ``<!-- readme-section: HEADING -->`` is replaced by the README's section of that ``## HEADING`` (``intro``:
  the text between the title and the first section), its ``docs/`` links made relative to the site: the README's
  set-up, quick start and table of contents are written once, and the site shows them as they are.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
NOTEBOOK_DEST = NOTEBOOKS.name  # the site path mirrors the repository path
HELP_MARKER = re.compile(r"^<!-- pyro-bnn-help: (?P<args>[^>]*?) -->$", flags=re.MULTILINE)
HELP_WIDTH = 110  # columns argparse formats the help for
NOTEBOOK_LIST = "<!-- notebook-list -->"
README = ROOT / "README.md"
README_MARKER = re.compile(r"^<!-- readme-section: (?P<heading>[^>]*?) -->$", flags=re.MULTILINE)
RESULT_MARKER = re.compile(r"^<!-- result-file: (?P<path>[^>]*?) -->$", flags=re.MULTILINE)


def _notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def notebook_title(path: Path) -> str:
    """The first Markdown heading of the notebook, or its file name."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return path.stem


def notebook_list(page_uri: str) -> str:
    prefix = "../" * page_uri.count("/")
    return "\n".join(
        f"- [{notebook_title(path)}]({prefix}{NOTEBOOK_DEST}/{path.name}) (`notebooks/{path.name}`)"
        for path in _notebooks()
    )


def on_config(config):
    """Appends a "Notebooks" section with one page per notebook to the navigation."""
    pages = [f"{NOTEBOOK_DEST}/{path.name}" for path in _notebooks()]
    if pages:
        config["nav"].append({"Notebooks": pages})
    return config


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns .ipynb files into pages
def on_files(files, config):
    """Adds the notebooks (they live in notebooks/, outside docs_dir) to the site's files."""
    for path in _notebooks():
        # src_dir is the repository root, so the page's source path is notebooks/NAME.ipynb itself (mkdocs-jupyter
        # wraps the file and reads that path; File.generated's virtual files would lose it)
        files.append(
            File(
                f"{NOTEBOOK_DEST}/{path.name}",
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:  # argparse keeps its subcommands here; there is no public accessor
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    raise ValueError(f"pyro-bnn has no command {name!r}")


def command_output(args: str) -> str:
    """What ``pyro-bnn ARGS`` prints, for the help, ``list`` and ``reproduce --list`` forms."""
    words = args.split()
    if words == ["list"]:
        from pyro_bnn.spec import catalogue

        return catalogue.listing()
    if words == ["reproduce", "--list"]:
        from pyro_bnn.reproduce.api import listing

        return listing()
    if not words or words[-1] != "--help":
        raise ValueError(f"pyro-bnn-help marker {args!r}: expected 'list', 'reproduce --list' or '[COMMAND] --help'")
    from pyro_bnn.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_WIDTH)  # argparse reads the width when the formatter is made
    try:
        parser = build_parser()
        for name in words[:-1]:
            parser = _subparser(parser, name)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            parser.print_help()
        return out.getvalue()
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def readme_section(heading: str) -> str:
    """The README's ``## heading`` section without its heading (``intro``: before the first section)."""
    lines = README.read_text(encoding="utf-8").split("\n")
    fence = False
    start = 1 if heading == "intro" else None  # the intro starts after the title line
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
        if fence or not line.startswith("## "):
            continue
        if start is not None:
            return "\n".join(lines[start:i]).strip("\n")
        if line == f"## {heading}":
            start = i + 1
    if start is None:
        raise ValueError(f"README.md has no section '## {heading}'")
    return "\n".join(lines[start:]).strip("\n")


def on_page_markdown(markdown, page, config, files):
    """Fills in the ``pyro-bnn-help`` and ``readme-section`` markers."""

    def help_block(match: re.Match) -> str:
        args = match["args"].strip()
        return f"```text\n$ pyro-bnn {args}\n{command_output(args).rstrip()}\n```"

    def readme_block(match: re.Match) -> str:
        text = readme_section(match["heading"].strip())
        # README links point into docs/; the pages sit at the top of the site (a page in a subfolder would need ../)
        depth = page.file.src_uri.count("/")
        return text.replace("](docs/", "](" + "../" * depth)

    def result_block(match: re.Match) -> str:
        # a committed result file's text without its title: the numbers are the ones its command wrote
        text = (ROOT / match["path"].strip()).read_text(encoding="utf-8")
        return "\n".join(line for line in text.splitlines() if not line.startswith("# "))

    markdown = markdown.replace(NOTEBOOK_LIST, notebook_list(page.file.src_uri))
    markdown = RESULT_MARKER.sub(result_block, markdown)
    return README_MARKER.sub(readme_block, HELP_MARKER.sub(help_block, markdown))
