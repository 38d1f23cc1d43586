"""Reading and writing checkpoint files (:mod:`pyro_bnn.infer.checkpoint`): a file that is no checkpoint is one
ValueError whatever its bytes."""

import warnings

import pytest

from pyro_bnn.infer import load_checkpoint


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
