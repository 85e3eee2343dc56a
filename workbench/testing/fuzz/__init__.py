"""A differential fuzzer: random graphs and random plans, every kernel against NumPy.

Each case is drawn from one seed: a graph of mixed dtypes (float32, float16, bfloat16,
int8, int32, int64, uint8, uint64, bool) with empty and size-1 axes, layout ops, casts,
gathers and matmuls; inputs holding boundary values (integer extremes, 0 and -1
divisors, inf, NaN, huge and negative gather indices); and a sequence of plan edits a
user or a planner might make -- fusing neighbours or any two kernels, splitting, stitch
schemes, all four thread mappings, every planner, the launch parameters the tuner
would try (a GPU GEMM tile's tiles and stages among them), and on a GPU's plans the
matmul precision. After every accepted edit the plan is
compiled for the cpu backend and run; each kernel is checked against the NumPy reference
on the inputs it received (:mod:`workbench.measure.verify`), and integer and bool
outputs must equal the op-by-op reference exactly.

What the generator leaves out, and why: comparisons, ``floor``/``ceil`` and
float-to-int or -bool casts read only values that no kernel computed (graph inputs and
their layout moves) -- a last-ulp difference in a computed float flips them (and a
fused half-precision kernel keeps its intermediates in float32, as torch.compile's do, so
its ``tanh(x) > x`` differs from op by op), and no error bound holds a flipped bit.

``--family blocks`` draws transformer blocks instead (:mod:`.blocks`),
``--family convs`` convolutional networks (:mod:`.convs`), ``--family
rows`` row workloads at every mapping's lengths (:mod:`.rows`), ``--family modules``
random torch modules imported by ``from_torch`` and checked against torch
(:mod:`.modules`). Two attacks besides: junk calls to the public API (:mod:`.api`) and
changes to a signed artifact (:mod:`.artifacts`); ``scripts/trust_campaign.py`` runs
them all on fresh seeds.
``python -m workbench.testing.fuzz --seconds 600`` runs cases until the time is spent and
prints (or ``--out`` writes) a report; the test suite runs a fixed, bounded set of
seeds (tests/test_fuzz.py).
"""
from .cases import Report, check_plan, draw_case, fuzz, run_case
from .graphs import FAMILIES, Case, Failure, draw_graph, draw_inputs
from .processes import fuzz_in_processes

__all__ = ["FAMILIES", "Case", "Failure", "Report", "check_plan", "draw_case", "draw_graph",
           "draw_inputs", "fuzz", "fuzz_in_processes", "run_case"]
