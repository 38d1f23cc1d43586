"""Standard normal noise for the fused objective, drawn on every CPU core.

On a CPU, ``torch.randn`` fills a tensor from one Mersenne-Twister stream on one core: for the 2.8 M weights of the
3FC network that is 11-12 ms of a 50 ms training step on a 2-core machine, while the other core waits. Split into
one chunk per thread, each chunk filled by its own ``torch.Generator`` seeded from torch's default generator, the
same draw takes about half the time (measured in ``bench/RESULTS.md``). The values are i.i.d. N(0, 1) either way,
and reproducible: the per-chunk seeds come from the default generator (``pyro.set_rng_seed`` fixes them), and each
chunk's values depend on its own seed only, not on thread timing.

On other devices (CUDA's generator is already parallel) and for small tensors this is plain ``torch.randn``.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch

PARALLEL_MIN_NUMEL = 1 << 18
"""Below this many values one ``torch.randn`` is as fast as the split (thread hand-off costs tens of microseconds)."""

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_generators = threading.local()


def _thread_pool(size: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != size:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool, _pool_size = ThreadPoolExecutor(size, thread_name_prefix="pyro_bnn-randn"), size
        return _pool


def _fill(chunk: torch.Tensor, seed: int) -> None:
    generator = getattr(_generators, "cpu", None)
    if generator is None:
        generator = _generators.cpu = torch.Generator()
    generator.manual_seed(seed)
    chunk.normal_(generator=generator)


def standard_normal(
    shape: tuple[int, ...] | torch.Size, *, dtype: torch.dtype, device: torch.device, threads: int | None = None
) -> torch.Tensor:
    """A tensor of i.i.d. N(0, 1) values, ``torch.randn(shape)`` in distribution.

    Args:
        shape: The shape of the result.
        dtype: A floating dtype.
        device: Where to draw. On a CPU a large draw is split over ``threads`` chunks filled in parallel.
        threads: Chunks for a CPU draw (default ``torch.get_num_threads()``); 1 is exactly ``torch.randn``.

    Returns:
        ``(*shape)`` tensor. Consumes from torch's default CPU generator: the draw itself (one chunk), or one
        seed per chunk.
    """
    with torch.profiler.record_function("pyro_bnn::standard_normal"):  # a named range in torch profiler traces
        return _standard_normal(tuple(shape), dtype, torch.device(device), threads)


def _standard_normal(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, threads: int | None):
    threads = torch.get_num_threads() if threads is None else threads
    numel = 1
    for size in shape:
        numel *= size
    if device.type != "cpu" or threads < 2 or numel < PARALLEL_MIN_NUMEL:
        return torch.randn(shape, dtype=dtype, device=device)
    out = torch.empty(shape, dtype=dtype, device=device)
    seeds = torch.randint(0, 2**62, (threads,)).tolist()
    chunks = out.view(-1).chunk(threads)
    # list() waits for every chunk and re-raises a worker's exception here.
    list(_thread_pool(threads).map(_fill, chunks, seeds))
    return out
