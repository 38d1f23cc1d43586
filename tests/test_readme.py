"""The README's quick start runs as written, with small settings.

The Python block under ``## Quick start`` in README.md is extracted and executed. Two things differ from a reader's
run, both kept minimal:

1. **The data.** Tests never read the real data sets (``tests/conftest.py`` points every source into ``tmp_path``),
   so Fashion-MNIST is a stand-in: random 28x28 images with labels cycling through 0-9, written as IDX files into a
   folder that ``$PYRO_BNN_DATA`` names. The quick start's ``load_dataset("fashion-mnist", ...)`` finds it there (with
   a ``DataContentWarning``: it is not the published set) exactly as it finds the real files on a reader's machine.
2. **The sizes**, by the textual substitutions in ``SMALL``: 300 training and 100 validation images instead of
   10 000 and the default 10 000, one epoch instead of five, 4 posterior samples instead of 100. Each must match
   exactly once, so a quick start that changes fails here rather than silently running something else.

Everything else (imports, model, prior, likelihood, guide, trainer options, prediction, metrics) runs unchanged.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import torch

from pyro_bnn.data import DataContentWarning

README = Path(__file__).resolve().parent.parent / "README.md"

SMALL = {
    "train_subset=10_000": "train_subset=300, val_size=100",
    "epochs=5": "epochs=1",
    "num_samples=100": "num_samples=4",
}
STAND_IN = {"train": 500, "t10k": 200}  # images in the stand-in Fashion-MNIST's two parts


def quick_start() -> str:
    """The Python code blocks of the README's ``## Quick start`` section, joined."""
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## Quick start\n(.*?)(?=^## )", text, flags=re.MULTILINE | re.DOTALL)
    assert match, "README.md has no '## Quick start' section"
    blocks = re.findall(r"^```python\n(.*?)^```", match[1], flags=re.MULTILINE | re.DOTALL)
    assert blocks, "the README's quick start has no ```python block"
    return "\n".join(blocks)


def write_idx(path: Path, array: np.ndarray, magic: int) -> None:
    header = magic.to_bytes(4, "big") + b"".join(size.to_bytes(4, "big") for size in array.shape)
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def write_stand_in(folder: Path) -> Path:
    """A Fashion-MNIST-shaped IDX folder: random pixels, labels 0-9 in turn."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for part, n in STAND_IN.items():
        write_idx(folder / f"{part}-images-idx3-ubyte", rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8), 2051)
        write_idx(folder / f"{part}-labels-idx1-ubyte", (np.arange(n) % 10).astype(np.uint8), 2049)
    return folder


def test_quick_start_is_extracted():
    code = quick_start()
    assert "load_dataset(" in code and "Trainer(" in code and "predict(" in code
    for old in SMALL:
        assert code.count(old) == 1, f"the quick start no longer has {old!r} once: update SMALL in {__file__}"


def _run_quick_start(code: str) -> dict:
    namespace = {"__name__": "__readme__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataContentWarning)  # the stand-in is not the published data set
        exec(compile(code, f"{README}:Quick start", "exec"), namespace)
    return namespace


def test_quick_start_runs(tmp_path, monkeypatch, capsys):
    code = quick_start()
    for old, new in SMALL.items():
        code = code.replace(old, new)
    monkeypatch.setenv("PYRO_BNN_DATA", str(write_stand_in(tmp_path / "fashion-mnist")))
    namespace = _run_quick_start(code)

    data, history, prediction = namespace["data"], namespace["history"], namespace["prediction"]
    assert (len(data.train), len(data.val), len(data.test)) == (300, 100, STAND_IN["t10k"])
    assert len(history) == 1
    assert prediction.probs.shape == (4, STAND_IN["t10k"], 10)
    printed = capsys.readouterr().out
    for key in ("accuracy", "nll", "brier", "ece", "mce"):
        assert f"'{key}'" in printed, printed

    # Run twice, it gives the same numbers: its seeds cover the network's start, the guide, the steps and the draws.
    again = _run_quick_start(code)
    assert again["history"][0]["loss"] == history[0]["loss"]
    assert torch.equal(again["prediction"].probs, prediction.probs)
