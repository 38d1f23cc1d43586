"""Standard normal draws on every CPU core: the weight noise of the fused objective and of the flat guide's draws.

A bottom-layer module: it imports torch only, so every layer of pyro_bnn may use it (:mod:`pyro_bnn.guides.flat`
draws its posterior samples with it, :mod:`pyro_bnn.infer.fast` its training noise). It used to be
``pyro_bnn.infer.noise``, which still re-exports it.

On a CPU, ``torch.randn`` fills a tensor from one Mersenne-Twister stream on one core: for the 2.8 M weights of the
3FC network that is 9.8 ms of a 40-50 ms training step on a 2-core machine, while the other core waits. Split into
:data:`CHUNKS` chunks, each filled by its own ``torch.Generator`` seeded from torch's default generator and the
chunks spread over the threads, the same draw takes 5.4 ms there (mean of 40 draws after a warm-up). The values
are i.i.d. N(0, 1) either way, and reproducible: the per-chunk seeds come from the default generator
(``pyro.set_rng_seed`` fixes them), each chunk's values depend on its own seed only, and the number of chunks is
fixed, so the same seed gives the same values on any number of threads or cores.

On other devices (CUDA's generator is already parallel) and for small tensors this is plain ``torch.randn``.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch

PARALLEL_MIN_NUMEL = 1 << 18
"""Below this many values one ``torch.randn`` is as fast as the split (thread hand-off costs tens of microseconds)."""

CHUNKS = 4
"""Chunks of a large draw, whatever the thread count (so that values do not depend on the machine)."""

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
    shape: tuple[int, ...] | torch.Size,
    *,
    dtype: torch.dtype,
    device: torch.device,
    threads: int | None = None,
    generator: torch.Generator | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """A tensor of i.i.d. N(0, 1) values, ``torch.randn(shape)`` in distribution.

    Args:
        shape: The shape of the result.
        dtype: A floating dtype.
        device: Where to draw. On a CPU a draw of at least :data:`PARALLEL_MIN_NUMEL` values is split into
            :data:`CHUNKS` chunks filled in parallel.
        threads: Worker threads for those chunks (default ``torch.get_num_threads()``); the values do not depend on
            it.
        generator: Draw from this generator instead of torch's default one (on ``device``): a run of a batch draws
            from its own (:mod:`pyro_bnn.batched`).
        out: A contiguous tensor of ``shape`` to fill (and return) instead of a new one.

    Returns:
        ``(*shape)`` tensor. Consumes from ``generator`` (default: torch's default generator): the draw itself
        (``torch.randn``, for a small draw or another device), or one seed per chunk.
    """
    with torch.profiler.record_function("pyro_bnn::standard_normal"):  # a named range in torch profiler traces
        return _standard_normal(tuple(shape), dtype, torch.device(device), threads, generator, out)


def _standard_normal(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    threads: int | None,
    generator: torch.Generator | None = None,
    out: torch.Tensor | None = None,
):
    threads = torch.get_num_threads() if threads is None else threads
    numel = 1
    for size in shape:
        numel *= size
    if device.type != "cpu" or numel < PARALLEL_MIN_NUMEL:
        if out is not None:
            return out.normal_(generator=generator)
        return torch.randn(shape, dtype=dtype, device=device, generator=generator)
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=device)
    seeds = torch.randint(0, 2**62, (CHUNKS,), generator=generator).tolist()
    chunks = out.view(-1).chunk(CHUNKS)
    if threads < 2:
        for chunk, seed in zip(chunks, seeds, strict=True):
            _fill(chunk, seed)
        return out
    # list() waits for every chunk and re-raises a worker's exception here.
    list(_thread_pool(min(threads, CHUNKS)).map(_fill, chunks, seeds))
    return out
