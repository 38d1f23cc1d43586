import os

import pytest
from matplotlib.figure import Figure

from pyro_bnn.plots import save_figure

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _figure() -> Figure:
    figure = Figure(figsize=(2, 2))
    figure.add_subplot().plot([0, 1], [1, 0])
    return figure


def test_writes_png_creating_parent_directories(tmp_path):
    target = tmp_path / "nested" / "deeper" / "reliability.png"
    written = save_figure(_figure(), target)
    assert written == target
    assert target.read_bytes().startswith(PNG_MAGIC)
    # Nothing but the figure is left in the directory: no temporary file.
    assert os.listdir(target.parent) == ["reliability.png"]


def test_gets_ordinary_file_permissions(tmp_path):
    umask = os.umask(0)
    os.umask(umask)
    target = save_figure(_figure(), tmp_path / "figure.png")
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_without_suffix_appends_png(tmp_path):
    written = save_figure(_figure(), str(tmp_path / "figure"))
    assert written == tmp_path / "figure.png"
    assert written.read_bytes().startswith(PNG_MAGIC)


def test_format_follows_the_suffix(tmp_path):
    svg = save_figure(_figure(), tmp_path / "figure.svg")
    assert b"<svg" in svg.read_bytes()[:2000]
    pdf = save_figure(_figure(), tmp_path / "figure.PDF")
    assert pdf.read_bytes().startswith(b"%PDF")
    assert sorted(os.listdir(tmp_path)) == ["figure.PDF", "figure.svg"]


def test_unknown_suffix_raises_and_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match=r"cannot write a figure as '\.docx'.*\.png"):
        save_figure(_figure(), tmp_path / "out" / "figure.docx")
    assert not (tmp_path / "out").exists()


def test_failed_render_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "figure.png"
    target.write_bytes(b"old contents")
    figure = _figure()

    def broken_savefig(path, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"half a png")
        raise RuntimeError("renderer crashed")

    figure.savefig = broken_savefig
    with pytest.raises(RuntimeError, match="renderer crashed"):
        save_figure(figure, target)
    assert target.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == ["figure.png"]


def test_replaces_an_existing_file(tmp_path):
    target = tmp_path / "figure.png"
    target.write_bytes(b"old contents")
    save_figure(_figure(), target)
    assert target.read_bytes().startswith(PNG_MAGIC)


def test_closes_a_pyplot_figure(tmp_path):
    pyplot = pytest.importorskip("matplotlib.pyplot")
    figure = pyplot.figure()
    figure.add_subplot().plot([0, 1])
    save_figure(figure, tmp_path / "figure.png")
    assert not pyplot.fignum_exists(figure.number)
