"""Milliseconds per component of one training step (torch profiler), for the before/after table of bench/RESULTS.md.

A step is what :meth:`pyro_bnn.infer.Trainer.fit` does per batch: ``objective(...)``, ``loss.backward()``,
``optimizer.step()``, run on a trainer's own objective, guide and optimiser. Each phase is wrapped in a
``record_function`` range; inside them the profiler's operator times are grouped into matrix products, random
draws and the rest of the operators, and what no operator accounts for is Python and dispatch overhead.
"""

from __future__ import annotations

from torch.profiler import ProfilerActivity, profile, record_function

PHASES = ("objective", "backward", "optimizer")
MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")
DRAW_RANGE = "pyro_bnn::standard_normal"
RANDOM = ("aten::normal_", "aten::randn", "aten::randn_like", "aten::bernoulli_", "aten::random_", "aten::uniform_")


def _category(name: str) -> str | None:
    if name in MATMUL:
        return "matmul"
    if name in RANDOM:
        return "random draws"
    return None


def profile_trainer_step(trainer, batches, steps: int = 10) -> dict[str, float]:
    """Milliseconds per step: wall time of each phase, and operator self-time in matmuls and random draws.

    Args:
        trainer: A set-up :class:`~pyro_bnn.infer.Trainer` (``trainer.setup(x, y)`` has run).
        batches: ``(x, y)`` pairs, cycled.
        steps: Steps profiled (after two unprofiled warm-up steps).
    """
    objective, bnn, guide, optimizer = trainer.objective, trainer.bnn, trainer.guide, trainer.optimizer

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with record_function("objective"):
            loss = objective(bnn, guide, x, y, 1.0).loss
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            optimizer.step()

    for i in range(2):
        step(*batches[i % len(batches)])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            step(*batches[i % len(batches)])
    out: dict[str, float] = {}
    draw_range = 0.0  # pyro_bnn's draw, whose worker threads the profiler does not see
    for event in prof.key_averages():
        if event.key in PHASES:
            out[event.key] = event.cpu_time_total / 1000 / steps
        if event.key == DRAW_RANGE:
            draw_range = event.cpu_time_total / 1000 / steps
        category = _category(event.key)
        if category is not None:
            out[category] = out.get(category, 0.0) + event.self_cpu_time_total / 1000 / steps
    # On one thread the range contains the aten::normal_ it times; on several only the range sees the workers.
    out["random draws"] = max(out.get("random draws", 0.0), draw_range)
    out["total"] = sum(out.get(phase, 0.0) for phase in PHASES)
    return out
