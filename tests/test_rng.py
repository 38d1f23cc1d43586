"""The parallel standard-normal draw: N(0, 1), independent across chunks, reproducible from torch's seed."""

import math

import pytest
import torch

from pyro_bnn import rng
from pyro_bnn.rng import CHUNKS, PARALLEL_MIN_NUMEL, standard_normal

N = 4 * PARALLEL_MIN_NUMEL


def _draw(threads, shape=(N,), seed=0):
    torch.manual_seed(seed)
    return standard_normal(shape, dtype=torch.float32, device=torch.device("cpu"), threads=threads)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_values_are_standard_normal_and_the_chunks_independent(threads):
    z = _draw(threads).double()
    assert abs(z.mean().item()) < 5 / math.sqrt(N)
    assert abs(z.var().item() - 1) < 5 * math.sqrt(2 / N)
    # Kolmogorov-Smirnov distance to the standard normal CDF; the 0.1 % critical value is 1.95 / sqrt(n).
    sorted_z = z.sort().values
    cdf = 0.5 * (1 + torch.erf(sorted_z / math.sqrt(2)))
    ranks = torch.arange(1, N + 1, dtype=torch.float64) / N
    assert (cdf - ranks).abs().max().item() < 1.95 / math.sqrt(N)
    # Chunks seeded alike would repeat each other; independent chunks are uncorrelated.
    chunks = z.chunk(CHUNKS)
    size = min(len(c) for c in chunks)
    for a, b in zip(chunks[:-1], chunks[1:], strict=True):
        corr = torch.corrcoef(torch.stack([a[:size], b[:size]]))[0, 1].item()
        assert abs(corr) < 5 / math.sqrt(size)


def test_reproducible_from_the_default_seed_and_different_across_seeds():
    assert torch.equal(_draw(2, seed=4), _draw(2, seed=4))
    assert not torch.equal(_draw(2, seed=4), _draw(2, seed=5))


def test_the_values_do_not_depend_on_the_thread_count():
    assert torch.equal(_draw(1, seed=6), _draw(2, seed=6)) and torch.equal(_draw(2, seed=6), _draw(5, seed=6))


def test_small_draws_are_plain_randn_and_other_shapes_work():
    torch.manual_seed(7)
    small = torch.randn(3, 1, 10)
    assert torch.equal(_draw(4, shape=(3, 1, 10), seed=7), small)
    assert _draw(2, shape=(3, 1, N // 3)).shape == (3, 1, N // 3)


def test_the_old_infer_noise_module_re_exports_the_same_objects():
    from pyro_bnn.infer import noise

    assert noise.standard_normal is rng.standard_normal
    assert (noise.CHUNKS, noise.PARALLEL_MIN_NUMEL) == (rng.CHUNKS, rng.PARALLEL_MIN_NUMEL)


@pytest.mark.parametrize("numel", [10, PARALLEL_MIN_NUMEL + 3])
def test_a_generator_of_its_own_gives_the_draw_and_leaves_the_default_stream_alone(numel):
    """With ``generator``, the values depend on that generator only (the same seed gives the same values whatever
    the default generator's state), torch's default stream is untouched, and ``out`` receives them."""
    torch.manual_seed(0)
    before = torch.get_rng_state()
    first = standard_normal((numel,), dtype=torch.float32, device="cpu", generator=torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(123)
    out = torch.empty(numel)
    second = standard_normal(
        (numel,), dtype=torch.float32, device="cpu", generator=torch.Generator().manual_seed(7), out=out
    )
    assert second is out and torch.equal(first, second)
    other = standard_normal((numel,), dtype=torch.float32, device="cpu", generator=torch.Generator().manual_seed(8))
    assert not torch.equal(first, other)
    assert abs(float(first.mean())) < 5 / numel**0.5 + 0.01
