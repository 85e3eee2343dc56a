"""Tensor-parallel code exported by torch.export (``_c10d_functional`` collectives +
``wait_tensor``, local shapes) imported as a DistProgram: its single-process reference
equals the unsharded model computed by torch, it runs on 2 gloo ranks within the
tolerance, and what cannot be taken is refused with the reason."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as fc  # noqa: E402

from workbench.distributed.from_export import from_export  # noqa: E402
from workbench.distributed.propagate import PlacementError  # noqa: E402
from workbench.distributed.runner import run_ranks  # noqa: E402
from workbench.errors import GraphError, UnsupportedOpError  # noqa: E402
from workbench.runtime.reference import run_reference  # noqa: E402

T, H, F, P = 4, 8, 12, 2      # tokens, hidden, ffn, ranks


@pytest.fixture(scope="module")
def fake_group():
    """One process standing for P ranks while exporting (torch's fake group: export
    records shapes only)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=P)
    yield dist.group.WORLD
    dist.destroy_process_group()


class MegatronMLP(torch.nn.Module):
    """Megatron's MLP as one rank writes it (column- then row-parallel matmul,
    AllReduce, residual, LayerNorm), and a ZeRO-style gradient step beside it
    (ReduceScatter, work on the shard, AllGather)."""

    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(H)

    def forward(self, x, w1, b1, w2, g):
        h = torch.nn.functional.gelu(x @ w1 + b1)
        y = fc.all_reduce(h @ w2, "sum", dist.group.WORLD)
        s = fc.reduce_scatter_tensor(g, "avg", 0, dist.group.WORLD)
        return self.ln(y + x), fc.all_gather_tensor(s * 0.5 + 1.0, 0, dist.group.WORLD)


LOCAL = (torch.randn(T, H), torch.randn(H, F // P), torch.randn(F // P),
         torch.randn(F // P, H), torch.randn(T, H))
PLACED = {"w1": "S(1)", "b1": "S(0)", "w2": "S(0)", "g": "P(avg)"}


def test_megatron_mlp_imports_matches_torch_and_runs_on_two_ranks(fake_group):
    m = MegatronMLP()
    torch.nn.init.normal_(m.ln.weight)
    torch.nn.init.normal_(m.ln.bias)
    d = from_export(m, LOCAL, ranks=P, placements=PLACED)
    ops = [n.op for n in d.graph.nodes]
    assert ops.count("wait_tensor") == 3 and "reduce_scatter" in ops and "all_gather" in ops
    assert str(d.placements["mm_1"]) == "P(sum)"        # the row-parallel partial sum
    # the global program's reference is the unsharded model, as torch computes it
    rng = np.random.default_rng(7)
    glob = {k: rng.standard_normal(d.graph.value(k).shape).astype(np.float32)
            for k in d.graph.inputs}
    t = {k: torch.from_numpy(v) for k, v in glob.items()}
    with torch.no_grad():
        want = (m.ln(torch.nn.functional.gelu(t["x"] @ t["w1"] + t["b1"]) @ t["w2"]
                     + t["x"]), t["g"] * 0.5 + 1.0)
    ref = run_reference(d.graph, glob)
    for o, w in zip(d.graph.outputs, want):
        np.testing.assert_allclose(ref[o], w.numpy(), rtol=1e-4, atol=1e-5)
    run = run_ranks(d, inputs=glob)
    assert run.ok, run.errors


class _Refused(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x):
        if self.how == "min":
            return fc.all_reduce(x, "min", dist.group.WORLD)
        return fc.all_to_all_single(x, [1, 3], [3, 1], dist.group.WORLD)


@pytest.mark.parametrize("how, reason", [
    ("min", "reduce op 'min'; the workbench's collectives reduce by sum, avg, max"),
    ("a2a", r"all_to_all_single with unequal splits \(output_split_sizes \[1, 3\].*pad "
            "the rows to a multiple of 2 and pass None")])
def test_collectives_that_cannot_be_taken_are_refused_with_the_reason(fake_group, how,
                                                                      reason):
    with pytest.raises(UnsupportedOpError, match=reason):
        from_export(_Refused(how), (torch.randn(4, 2),), ranks=P)


def test_a_group_size_other_than_the_ranks_is_refused(fake_group):
    with pytest.raises(UnsupportedOpError, match="group of 2 ranks; the program runs on 4"):
        from_export(MegatronMLP(), LOCAL, ranks=4, placements=PLACED)


def test_wrong_placements_are_named(fake_group):
    # w1 split by rows instead of columns: the global matmul does not fit
    with pytest.raises(GraphError, match=r"inner dims differ.*placements given.*'w1': "
                                         r"'S\(0\)'"):
        from_export(MegatronMLP(), LOCAL, ranks=P, placements={**PLACED, "w1": "S(0)"})
    with pytest.raises(PlacementError, match="reduce_scatter"):    # a shard reduced
        from_export(MegatronMLP(), LOCAL, ranks=P, placements={**PLACED, "g": "S(0)"})
    with pytest.raises(GraphError, match="pass a sharded weight as an input"):
        from_export(MegatronMLP(), LOCAL, ranks=P, placements={**PLACED, "ln.weight": "S(0)"})


class ExpertParallel(torch.nn.Module):
    """Expert (sequence) parallel as one rank writes it: its tokens sent out in equal
    blocks (all_to_all_single), the expert's matmul and GELU on what arrived, the
    results sent back, a residual."""

    def forward(self, x, w):
        y = fc.all_to_all_single(x, None, None, dist.group.WORLD)
        h = torch.nn.functional.gelu(y @ w)
        return fc.all_to_all_single(h, None, None, dist.group.WORLD) + x


def test_all_to_all_single_imports_and_runs_on_two_ranks(fake_group):
    from test_all_to_all_single import simulate_ranks
    d = from_export(ExpertParallel(), (torch.randn(4, H), torch.randn(H, H)), ranks=P,
                    placements={"x": "S(0)"})
    starts = [n for n in d.graph.nodes if n.op == "all_to_all_single"]
    assert len(starts) == 2 and all(str(d.placements[n.outputs[0]]) == "S(0)"
                                    for n in starts)
    # the global reference is the ranks exchanging blocks, written per rank in NumPy
    rng = np.random.default_rng(3)
    glob = {k: rng.standard_normal(d.graph.value(k).shape).astype(np.float32)
            for k in d.graph.inputs}
    gelu = lambda v: torch.nn.functional.gelu(torch.from_numpy(v)).numpy()
    want = simulate_ranks(gelu(simulate_ranks(glob["x"], P) @ glob["w"]), P) + glob["x"]
    (ref,) = run_reference(d.graph, glob).values()
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-6)
    run = run_ranks(d, inputs=glob)
    assert run.ok, run.errors
    with pytest.raises(PlacementError, match=r"takes Shard\(0\)"):    # x left replicated
        from_export(ExpertParallel(), (torch.randn(4, H), torch.randn(H, H)), ranks=P)
