"""Reading and writing checkpoint files (:mod:`pyro_bnn.infer.checkpoint`): a file that is no checkpoint is one
ValueError whatever its bytes, and the writer writes only what the weights-only loader reads back."""

import pickle
import warnings
from collections import Counter, OrderedDict, defaultdict, namedtuple
from decimal import Decimal
from enum import Enum

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pyro_bnn import BNN
from pyro_bnn.guides.movement import UnmovedPosteriorWarning
from pyro_bnn.infer import Callback, Checkpoint, RuntimeOptions, Trainer, load_checkpoint, save_checkpoint
from pyro_bnn.likelihoods import Gaussian
from pyro_bnn.priors import NormalPrior


@pytest.mark.parametrize(
    "content, why",
    [
        (b"step,loss\n1,0.5\n", "IndexError: pop from empty list"),  # a CSV file renamed .pt
        (b"hello", "KeyError: 101"),  # "h" reads memo entry "e" (101), never stored
    ],
    ids=["csv", "hello"],
)
def test_a_text_file_is_no_checkpoint_in_one_line(tmp_path, content, why):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        load_checkpoint(path)
    assert str(info.value) == (
        f"{path} is not a pyro_bnn checkpoint ({len(content)} bytes): torch.load reads no checkpoint in it "
        f"(its bytes are no pickle torch.save wrote: {why})"
    )


@pytest.mark.parametrize("tail", [b"", b"xyz\n12345", b"hello", bytes(8)], ids=["alone", "text", "hello", "zeros"])
def test_every_first_byte_gives_a_value_error(tmp_path, tail):
    """Bytes ( ) . N Q R ] a b e h j q r s t u } and 0x81, 0x85-0x89, 0x8f raised a bare IndexError or KeyError
    (and a struct.error after G, J, M, X, j, r), which the CLI printed as a traceback."""
    path = tmp_path / "f.pt"
    for first in range(256):
        path.write_bytes(bytes([first]) + tail)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 0x80 N: torch warns of an unknown pickle protocol N first
            with pytest.raises(ValueError) as info:
                load_checkpoint(path)
        text = str(info.value)
        assert str(path) in text and "\n" not in text, (first, text)


class _Best(Callback):
    """Keeps the best loss as NumPy gives it (np.float64, a float subclass), or as ``make`` turns it."""

    def __init__(self, make=np.float64):
        self.best, self.make = None, make

    def on_epoch_end(self, trainer, record):
        self.best = self.make(record["loss"])

    def state_dict(self):
        return {"best": self.best}

    def load_state_dict(self, state):
        self.best = state["best"]


def _fit(callbacks, epochs, resume_from=None):
    x = torch.randn(40, 2, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=10)
    bnn = BNN(nn.Linear(2, 1), NormalPrior(0.0, 1.0), Gaussian(40))
    trainer = Trainer(bnn, "flat:0.01", callbacks=callbacks, runtime=RuntimeOptions(seed=0, progress=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnmovedPosteriorWarning)  # a few steps at the default lr: expected
        trainer.fit(loader, epochs, resume_from=resume_from)
    return trainer


def test_a_callbacks_numpy_number_is_written_as_a_python_number_and_resumes(tmp_path):
    """np.float64 was pickled by its class's name: written, then refused on resume (it names
    numpy._core.multiarray.scalar)."""
    path = tmp_path / "cb.pt"
    first = _fit([_Best(), Checkpoint(path)], 2)
    stored = load_checkpoint(path)["callbacks"]["0:_Best"]["best"]
    assert type(stored) is float and stored == first.history[-1]["loss"]
    best = _Best()
    resumed = _fit([best, Checkpoint(path)], 3, resume_from=path)
    assert resumed.epoch == 3 and best.best == resumed.history[-1]["loss"]


def test_a_callback_state_the_loader_would_refuse_is_refused_before_writing(tmp_path):
    path = tmp_path / "cb.pt"
    _fit([Checkpoint(path)], 1)
    before = path.read_bytes()
    with pytest.raises(ValueError) as info:
        _fit([_Best(lambda loss: Decimal(str(loss))), Checkpoint(path)], 1)
    assert str(info.value) == (
        f"refusing to write {path}: its entry ['callbacks']['0:_Best']['best'] is of type decimal.Decimal, which "
        "torch.load(weights_only=True) would refuse on resume; a checkpoint holds only tensors, numbers, strings, "
        "booleans, None and lists, tuples and dicts of them"
    )
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["cb.pt"]


Point = namedtuple("Point", "x y")


class _Kind(str, Enum):
    A = "a"


@pytest.mark.parametrize(
    "value",
    [
        1.5, 3, True, None, "s", 2 + 1j, b"\x00\x01", bytearray(b"ab"), (1, "a"), [1, [2.0, None]], {1, "a"},
        OrderedDict(a=1), Counter("aab"), {0: {"k": torch.ones(2)}}, torch.Size([2, 3]), torch.device("cpu"),
        torch.float16, torch.strided, torch.nn.Parameter(torch.ones(2)),
        # refused by the weights-only loader:
        frozenset({1}), Decimal("1.5"), Point(1, 2), _Kind.A, defaultdict(int), np.ones(3), range(3), object(),
    ],
    # ids by type: a repr may hold an address (object()) or a set's hash order, which differ between the xdist
    # workers, and pytest-xdist refuses to run when the workers collect different ids
    ids=lambda value: type(value).__name__,
)  # fmt: skip
def test_the_writer_refuses_exactly_what_the_weights_only_loader_refuses(tmp_path, value):
    """The oracle is torch itself: torch.save, then torch.load(weights_only=True)."""
    try:
        torch.save({"v": value}, tmp_path / "plain.pt")
        torch.load(tmp_path / "plain.pt", weights_only=True)
        loads = True
    except pickle.UnpicklingError:
        loads = False
    if loads:
        assert save_checkpoint({"v": value}, tmp_path / "c.pt") and "v" in load_checkpoint(tmp_path / "c.pt")
    else:
        with pytest.raises(ValueError, match=r"^refusing to write .*c\.pt: its entry \['v'\] is of type "):
            save_checkpoint({"v": value}, tmp_path / "c.pt")
        assert not (tmp_path / "c.pt").exists()


@pytest.mark.parametrize(
    "value, number",
    [(np.float64(0.25), 0.25), (np.float32(0.5), 0.5), (np.int64(7), 7), (np.bool_(True), True),
     (np.array(2.5), 2.5), (np.complex64(1 + 2j), 1 + 2j)],
    ids=repr,
)  # fmt: skip
def test_numpy_scalars_and_0d_arrays_are_stored_as_python_numbers(tmp_path, value, number):
    save_checkpoint({"a": value, "b": [1.0, value], np.str_("c"): (value,)}, tmp_path / "c.pt")
    state = load_checkpoint(tmp_path / "c.pt")
    assert (state["a"], state["b"][1], state["c"][0]) == (number, number, number)
    assert type(state["a"]) is type(number) and type(state["b"][1]) is type(number)


def test_an_error_of_the_callers_map_location_is_not_blamed_on_the_file(tmp_path):
    # the bare errors translated for bytes that are no pickle were also caught from a valid checkpoint's
    # map_location: "KeyError 'cpu'" from the caller's own mapping read "... is not a pyro_bnn checkpoint"
    path = tmp_path / "ok.pt"
    save_checkpoint({"x": torch.zeros(2)}, path)
    devices = {"cuda:0": "cpu"}
    with pytest.raises(KeyError, match="cpu"):
        load_checkpoint(path, map_location=lambda storage, location: storage.to(devices[location]))
