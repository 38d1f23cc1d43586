"""Shared by the studies' command-line tests: a bad argument refused in one line before any work."""

from __future__ import annotations

import pytest


@pytest.fixture
def refused(tmp_path, capsys):
    """``refused(main, args, message)`` checks that ``main(args)`` exits with status 2 after printing one line ending
    ``: error: MESSAGE`` (with ``prefix=True``: holding ``: error: MESSAGE...``) and makes no ``out`` folder: a bad
    argument refused before any work. ``--out <tmp>/out``
    goes first unless ``args`` name an ``--out``; ``{tmp}`` in ``args`` and ``message`` stands for ``tmp_path``, which
    holds a file ``afile`` (an ``--out`` that is not a folder)."""
    (tmp_path / "afile").write_text("")

    def check(main, args: list[str], message: str, *, prefix: bool = False) -> None:
        args = [a.format(tmp=tmp_path) for a in args]
        with pytest.raises(SystemExit) as exit_:
            main(args if "--out" in args else ["--out", str(tmp_path / "out"), *args])
        assert exit_.value.code == 2
        err = capsys.readouterr().err  # PROG: error: MESSAGE, one line (PROG is the test runner's name here)
        line = f": error: {message.format(tmp=tmp_path)}" + ("" if prefix else "\n")
        assert line in err and err.count("\n") == 1, err
        assert not (tmp_path / "out").exists()

    return check
