"""The price of a repeat's steps, unfused or F at a time (``codegen/repeat_c.py``).

Why fusing steps pays: unfused, every step reads the carried state from memory and
writes it back, reads the invariant inputs again and is one call (a launch on a GPU);
fused F steps at a time, the state and invariants cross memory once per call, staying
in L1 (a CPU's tile) or registers (a GPU's thread) between the steps of one call. The
stacked inputs and outputs (actions, rewards) cross memory every step either way.

The model is the workbench's roofline: max(bytes / DRAM bandwidth, flops / peak) plus
one call overhead per call.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.repeat import Repeat
from ..ops import get_op
from .partition import Decision


@dataclass(frozen=True)
class RepeatCost:
    """A repeat's predicted run: ``steps_per_call`` None is the unfused program."""
    steps_per_call: int | None
    calls: int
    bytes: int
    flops: int
    seconds: float

    @property
    def ms(self) -> float:
        return self.seconds * 1e3


def _bytes(r: Repeat, names) -> int:
    return sum(r.body.value(n).nbytes for n in names)


def repeat_cost(r: Repeat, steps_per_call: int | None, device) -> RepeatCost:
    """The predicted run of ``r`` on ``device`` with F = ``steps_per_call`` steps per
    call (None: one step per call, the state through memory every step)."""
    trips = r.trips
    calls = trips if steps_per_call is None else -(-trips // steps_per_call)
    state = _bytes(r, r.carried_inputs)                 # read once and written once
    fixed = _bytes(r, r.invariant_inputs)
    streamed = _bytes(r, r.stacked_inputs) + _bytes(r, r.stacked_outputs)
    moved = calls * (2 * state + fixed) + trips * streamed
    per_element = sum(get_op(n.op).flops for n in r.body.nodes)
    elements = r.body.value(r.carried[0][0]).numel
    flops = trips * elements * per_element
    seconds = max(moved / device.dram_bandwidth, flops / device.peak_flops) + \
        calls * device.launch_overhead
    return RepeatCost(steps_per_call, calls, moved, flops, seconds)


def candidate_steps(trips: int) -> list[int]:
    """The F a session offers: powers of two below the trip count, and the trip count."""
    out, f = [], 1
    while f < trips:
        out.append(f)
        f *= 2
    return out + [trips]


def choose_steps(r: Repeat, device, slack: float = 0.01) -> int:
    """The smallest F predicted within ``slack`` of the fastest (past it, a longer
    call saves nothing the model can see, and a shorter one keeps more of the run
    interruptible)."""
    costs = {f: repeat_cost(r, f, device).seconds for f in candidate_steps(r.trips)}
    best = min(costs.values())
    return min(f for f, s in costs.items() if s <= best * (1 + slack))


def plan_steps(r: Repeat, device, refused: str | None = None,
               slack: float = 0.01) -> tuple[int | None, list[Decision]]:
    """The stitch planner on a repeat: the F :func:`choose_steps` picks (None where
    ``refused`` -- ``codegen.repeat_c.refusal``'s reason -- says the steps cannot be
    fused), and its decisions for people: unfused and every F considered with its
    predicted time, the F chosen and why, or the refusal."""
    unfused = repeat_cost(r, None, device)
    out = [Decision("considered", ("unfused",), f"predicted {unfused.ms:.3f} ms "
                    f"({unfused.calls} calls, {unfused.bytes / 1e6:.1f} MB)")]
    if refused:
        out.append(Decision("not fused", (r.name,), refused))
        return None, out
    chosen = choose_steps(r, device, slack)
    fastest = min(candidate_steps(r.trips), key=lambda f: repeat_cost(r, f, device).seconds)
    for f in candidate_steps(r.trips):
        c = repeat_cost(r, f, device)
        out.append(Decision("fused" if f == chosen else "considered", (f"x{f}",),
                            f"fuse steps x{f}: predicted {c.ms:.3f} ms ({c.calls} calls, "
                            f"{c.bytes / 1e6:.1f} MB), {unfused.seconds / c.seconds:.2f}x "
                            "unfused" + (f"; chosen: the smallest F within {slack:.0%} of "
                                         f"the fastest (x{fastest})" if f == chosen else "")))
    return chosen, out
