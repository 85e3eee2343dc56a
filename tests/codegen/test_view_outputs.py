"""A fused kernel that stores a value and a view of it (reshape, squeeze, unsqueeze)
computes the value once: both are stored from one loop, at the same offset (a view
keeps the row-major order). BERT's GELU backward stored ``mul_16`` (read by a matmul)
and ``view_25 = reshape(mul_16)`` (read by a transpose and a column sum) from two
loops, erf and exp evaluated twice per element.

Each case runs the real kernel against the NumPy reference on fresh random inputs
(checked runs poison the outputs first), on the C backend and in the CUDA emulator."""
import pytest

from workbench.codegen import RENDERERS, lower_plan
from workbench.codegen.kir import Let, Load, Loop, Store
from workbench.device import H100
from workbench.fusion.planners import run_planner
from workbench.ir import GraphBuilder
from workbench.session import Session

T, H = 32, 64       # 2048 elements: a GPU flat loop moves 16-byte vectors from 1024


def _gelu_backward(views):
    """dy * GELU'(x) over (1, T, H), stored as it is and as each view in ``views``
    (a list of (op, attrs) chains applied to it); returns the graph and the erf's id."""
    b = GraphBuilder("gelu_bwd_views")
    x, dy = b.input("x", (1, T, H)), b.input("dy", (1, T, H))
    cdf = b.op("erf", x * 0.7071067811865476) * 0.5 + 0.5
    pdf = b.op("exp", x * x * -0.5) * 0.3989422804014327
    grad = dy * (cdf + x * pdf)
    grad = b.output(grad, "grad")
    for k, chain in enumerate(views):
        v = grad
        for op, attrs in chain:
            v = b.op(op, v, **attrs)
        b.output(v, f"view{k}")
    g = b.build()
    (erf,) = [n.id for n in g.nodes if n.op == "erf"]
    return g, erf


def _walk(stmts):
    for s in stmts:
        yield s
        yield from _walk(getattr(s, "body", ()) or ())


def _one_kernel(g, backend: str) -> Session:
    s = Session(g, backend=backend, seed=5)
    s.fuse([n.id for n in g.nodes])
    assert len(s.plan.groups) == 1
    return s


def _computes_once(kernel, erf: str, outputs: int) -> None:
    stmts = list(_walk(kernel.body))
    assert sum(isinstance(x, Let) and x.node == erf for x in stmts) == 1, kernel.body
    assert sum(isinstance(x, Store) for x in stmts) == outputs
    assert sum(isinstance(x, Loop) for x in kernel.body) == 1


RESHAPE = [("reshape", {"shape": [T, H]})]
VIEWS = {
    "reshape": [RESHAPE],
    # a view of a view, and one whose axes cut the value's rows elsewhere
    "reshape-unsqueeze": [RESHAPE + [("unsqueeze", {"axes": [1]})]],
    "regrouped": [[("reshape", {"shape": [T * H // 8, 8]})]],
    "several": [RESHAPE, [("squeeze", {"axes": [0]})], [("reshape", {"shape": [T * H]})]],
}


@pytest.mark.parametrize("name", sorted(VIEWS))
@pytest.mark.parametrize("backend", ["cpu", "cuda-emu"])
def test_a_value_and_its_views_leave_one_loop_computed_once(wb, name, backend):
    g, erf = _gelu_backward(VIEWS[name])
    s = _one_kernel(g, backend)
    (k,) = s.kernels()
    _computes_once(k, erf, 1 + len(VIEWS[name]))
    for seed in (1, 2):                 # fresh inputs; a checked run poisons the outputs
        ins = wb.make_inputs(g, seed=seed)
        wb.check_outputs(s, ins, wb.reference(g, ins), f"{name} on {backend}")
    assert s.source(k.group, target="c").count("= erff(") == 1


def test_the_gpu_plan_stores_both_from_one_flat_loop(nvrtc_compile_plans):
    g, erf = _gelu_backward(VIEWS["several"])
    plan, _ = run_planner("rules", g, device=H100)
    (k,) = lower_plan(plan)
    _computes_once(k, erf, 4)
    (loop,) = [x for x in k.body if isinstance(x, Loop)]
    assert loop.bind == "flat" and loop.vector == 4      # 16-byte accesses, as before
    assert RENDERERS["cuda"].kernel(k).count("= erff(") == 1
    # and it compiles as the GPU runtime compiles it (NVRTC, sm_90)
    assert nvrtc_compile_plans([g], ["rules"]) == 1


def test_a_row_loop_stores_the_view_at_the_values_offset(wb):
    """On a CPU a bias broadcast over the rows makes the loop a row loop (rows apart from
    the last axis): the view of another shape is stored at the same row and column."""
    b = GraphBuilder("bias_tanh_view")
    x, bias = b.input("x", (2, T, H)), b.input("bias", (H,))
    y = b.output(b.tanh(x + bias) * 3.0, "y")
    b.output(b.op("reshape", y, shape=[2 * T, H]), "rows")
    b.output(b.op("reshape", y, shape=[2, T * H // 16, 16]), "regrouped")
    g = b.build()
    s = _one_kernel(g, "cpu")
    (k,) = s.kernels()
    (loop,) = [x for x in k.body if isinstance(x, Loop)]
    assert loop.bind == "grid"
    stmts = list(_walk(k.body))
    (tanh,) = [n.id for n in g.nodes if n.op == "tanh"]
    assert sum(isinstance(x, Let) and x.node == tanh for x in stmts) == 1
    for seed in (1, 2):
        ins = wb.make_inputs(g, seed=seed)
        wb.check_outputs(s, ins, wb.reference(g, ins), "row loop with views")


def test_unrelated_outputs_of_another_shape_keep_their_own_loop(wb):
    """Only views join a loop: a value of another shape that is not a view of a stored
    one (a transpose of it here) is still stored by a loop of its own."""
    b = GraphBuilder("transpose_apart")
    x = b.input("x", (T, H))
    y = b.output(b.tanh(x), "y")
    b.output(b.op("transpose", y, perm=[1, 0]) + 1.0, "yt")
    g = b.build()
    s = _one_kernel(g, "cpu")
    (k,) = s.kernels()
    assert sum(isinstance(x, Loop) for x in k.body) == 2
    ins = wb.make_inputs(g, seed=3)
    wb.check_outputs(s, ins, wb.reference(g, ins), "transpose apart")


@pytest.mark.parametrize("backend", ["cpu", "cuda-emu"])
def test_views_of_an_input_passed_through_load_it_once(wb, backend):
    """Views of a kernel's input leaving it as outputs (the backward hands a forward
    input on under two shapes) are stored from one loop over the input, each element
    loaded once, beside the rest of the kernel's work at that shape."""
    b = GraphBuilder("input_views")
    x = b.input("x", (1, T, H))
    b.output(b.op("reshape", x, shape=[T, H]), "rows")
    b.output(b.op("squeeze", x, axes=[0]), "squeezed")
    b.output(b.tanh(x) * 2.0, "y")
    g = b.build()
    s = _one_kernel(g, backend)
    (k,) = s.kernels()
    stmts = list(_walk(k.body))
    (xbuf,) = [p for p in k.params if p.value == "x"]
    assert sum(isinstance(x, Load) and x.buf == xbuf for x in stmts) == 1, k.body
    assert sum(isinstance(x, Loop) for x in k.body) == 1
    for seed in (1, 2):
        ins = wb.make_inputs(g, seed=seed)
        wb.check_outputs(s, ins, wb.reference(g, ins), f"input views on {backend}")
