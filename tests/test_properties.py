"""Property tests: random graphs of supported ops run on the cpu backend under every
planner, and random fuse/split/undo sequences, always against the NumPy reference.

Hypothesis is derandomized and database-less here, so every run (and CI) draws the
same examples; compiled kernels are cached, so repeated runs cost little.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from workbench.errors import FusionRefused
from workbench.fusion import PLANNERS
from workbench.ir import Graph, GraphBuilder
from workbench.session import Session

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])

# Ops defined (and smooth enough) on all of [-1, 1)-ish data; floor/ceil and comparisons
# are left to the per-op tests, since a last-ulp difference there flips the result.
UNARY = ["neg", "abs", "exp", "tanh", "sigmoid", "relu", "sin", "cos", "erf"]
BINARY = ["add", "sub", "mul", "max", "min"]
REDUCE = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min"]


def _factor_pairs(n):
    return [(d, n // d) for d in range(1, n + 1) if n % d == 0]


def random_graph(seed: int, n_steps: int) -> Graph:
    """A random graph: 1-2 float32 inputs of rank 1-3, then n_steps ops, each reading
    earlier tensors (mostly the latest, so chains are long); outputs are the last tensor
    and a random subset of the others.

    Drawn from a NumPy generator seeded by hypothesis rather than op by op from
    hypothesis itself: with 25 derandomized examples, hypothesis's own draws favour tiny
    near-duplicate graphs, while seeds give 25 different ones.
    """
    rng = np.random.default_rng(seed)
    pick = lambda xs: xs[int(rng.integers(len(xs)))]
    b = GraphBuilder(f"prop{seed}")

    def dim():
        return int(pick([1, 2, 3, 4, 5, 7, 33]))

    tensors = [b.input(f"x{k}", tuple(dim() for _ in range(int(rng.integers(1, 4)))))
               for k in range(int(rng.integers(1, 3)))]
    made = []
    for _ in range(n_steps):
        src = tensors[-1] if rng.random() < 0.6 else pick(tensors)
        shape = src.shape
        kind = pick(["unary", "unary", "binary", "binary", "reduce", "reduce", "transpose",
                     "reshape", "slice", "expand", "log"])
        if kind == "unary":
            t = b.op(pick(UNARY), src)
        elif kind == "log":      # log/div/sqrt/rsqrt on a positive argument
            pos = b.abs(src) + 1.0
            t = pick([lambda: b.log(pos), lambda: src / pos, lambda: b.sqrt(pos),
                      lambda: b.rsqrt(pos)])()
        elif kind == "binary":
            op = pick(BINARY)
            how = pick(["tensor", "input", "scalar"])
            others = [o for o in tensors
                      if _broadcastable(o.shape, shape) or _broadcastable(shape, o.shape)]
            if how == "tensor" and others:
                other = pick(others)
            elif how == "input" or not others:
                # a fresh input broadcasting against src: trailing dims kept or made 1
                rank = int(rng.integers(0, len(shape) + 1))
                tail = shape[len(shape) - rank:]
                oshape = tuple(1 if rng.random() < 0.5 else d for d in tail) or (1,)
                other = b.input(f"x{len(b._inputs)}", oshape)
            else:
                other = float(np.float32(rng.uniform(-2, 2)))
            swap = isinstance(other, type(src)) and rng.random() < 0.5
            t = b.op(op, other, src) if swap else b.op(op, src, other)
        elif kind == "reduce":
            if not shape:
                continue
            k = int(rng.integers(1, len(shape) + 1))
            axes = sorted(int(a) for a in rng.choice(len(shape), k, replace=False))
            t = b.op(pick(REDUCE), src, axes=axes, keepdims=bool(rng.random() < 0.5))
        elif kind == "transpose":
            if len(shape) < 2:
                continue
            t = b.transpose(src, perm=[int(p) for p in rng.permutation(len(shape))])
        elif kind == "reshape":
            n = int(np.prod(shape)) if shape else 1
            t = b.reshape(src, shape=list(pick([(n,)] + _factor_pairs(n))))
        elif kind == "slice":
            if not shape:
                continue
            axis = int(rng.integers(len(shape)))
            d = shape[axis]
            step = int(pick([1, 2, -1, -2]))
            start = int(rng.integers(d))
            end = d if step > 0 else -d - 1
            t = b.slice(src, starts=[start], ends=[end], axes=[axis], steps=[step])
        else:   # expand: a new leading axis, and every size-1 axis grown
            if len(shape) >= 4:
                continue
            new = [int(rng.integers(1, 4))] + [int(rng.integers(1, 4)) if s == 1 else s
                                               for s in shape]
            t = b.expand(src, shape=new)
        tensors.append(t)
        made.append(t)
    if not made:
        made.append(b.neg(tensors[-1]))
    extra = [t for t in made[:-1] if rng.random() < 0.25]
    for k, t in enumerate(extra + [made[-1]]):
        b.output(t, f"y{k}")
    return b.build()


def graphs(min_steps=2, max_steps=8):
    return st.builds(random_graph, seed=st.integers(0, 2**31 - 1),
                     n_steps=st.integers(min_steps, max_steps))


def _broadcastable(small, big):
    """Whether small broadcasts to big without changing big's shape."""
    if len(small) > len(big):
        return False
    return all(s == d or s == 1 for s, d in zip(small[::-1], big[::-1]))


def _check_plan_shape(plan):
    """Every node in exactly one group, and groups in an executable order."""
    g = plan.graph
    seen = [n for gr in plan.groups for n in gr.nodes]
    assert sorted(seen) == sorted(n.id for n in g.nodes)
    done = set(g.inputs) | set(g.constants)
    for gr in plan.groups:
        made = {o for n in gr.nodes for o in g.node(n).outputs}
        for n in gr.nodes:
            for i in g.node(n).inputs:
                assert i in done or i in made, f"{gr.id} reads {i} before it is made"
        done |= made


@SETTINGS
@given(g=graphs())
def test_random_graphs_match_reference_under_every_planner(wb, g):
    note(str(g))
    ins = wb.make_inputs(g, seed=3)
    refs = wb.reference(g, ins)
    s = Session(g, backend="cpu")
    for planner in ("none", "rules"):
        if planner != "none":
            s.auto(planner)
        note(f"{planner}: {[gr.nodes for gr in s.plan.groups]}")
        _check_plan_shape(s.plan)
        wb.check_outputs(s, ins, refs, f"planner {planner}")
    assert set(PLANNERS) >= {"none", "rules"}


actions = st.lists(st.tuples(st.sampled_from(["fuse_edge", "fuse_edge", "fuse_edge",
                                              "fuse_any", "split", "split", "undo", "auto"]),
                             st.integers(0, 63), st.integers(0, 63)),
                   min_size=2, max_size=7)


def _neighbours(g, nid):
    """Nodes that feed nid or read from it (fusing along an edge mostly succeeds)."""
    n = g.node(nid)
    out = [g.producer[i].id for i in n.inputs if i in g.producer]
    out += [c.id for o in n.outputs for c in g.consumers[o]]
    return list(dict.fromkeys(out))


@SETTINGS
@given(g=graphs(min_steps=3, max_steps=7), acts=actions)
def test_random_fuse_split_sequences(wb, g, acts):
    """Each step either raises FusionRefused and changes nothing, or gives a valid plan
    whose outputs match the reference; undo restores the previous plan, redo the new."""
    note(str(g))
    ins = wb.make_inputs(g, seed=4)
    refs = wb.reference(g, ins)
    s = Session(g, backend="cpu")
    ids = [n.id for n in g.nodes]
    for act, i, j in acts:
        before, depth, pos = s.plan, len(s.history), s.position
        if act == "undo":
            if s.position == 0:
                continue
            s.undo()
            assert s.plan is s.history[pos - 1].plan
            s.redo()
            assert s.plan is before
            continue
        a = ids[i % len(ids)]
        c = None
        try:
            if act == "fuse_edge" and _neighbours(g, a):
                nb = _neighbours(g, a)
                c = nb[j % len(nb)]
                note(f"fuse {a} {c}")
                new = s.fuse([a, c])
            elif act.startswith("fuse"):
                c = ids[j % len(ids)]
                note(f"fuse {a} {c}")
                new = s.fuse([a, c])
            elif act == "split":
                # split a multi-op group when there is one
                multi = [gr for gr in s.plan.groups if len(gr.nodes) > 1]
                if multi:
                    a = multi[j % len(multi)].nodes[0]
                note(f"split {a}")
                new = s.split(a)
            else:
                note("auto rules")
                new = s.auto("rules")
        except FusionRefused as e:
            # refused: nothing changed, and the reason is a sentence for a person
            assert s.plan is before and len(s.history) == depth and s.position == pos
            assert str(e)
            continue
        if new == before and new.planner == before.planner:   # (auto twice: no step)
            assert s.plan is before and len(s.history) == depth and s.position == pos
            continue
        assert s.plan is new and s.position == pos + 1
        _check_plan_shape(new)
        if act.startswith("fuse"):
            assert len(new.groups) < len(before.groups)
            assert new.group(a) is new.group(c)
        elif act == "split":
            assert len(new.groups) > len(before.groups)
            assert all(len(new.group(n).nodes) == 1 for n in before.group(a).nodes)
        note(f"plan: {[gr.nodes for gr in new.groups]}")
        wb.check_outputs(s, ins, refs, f"after {act}")
        # undo restores the previous plan exactly; redo comes back
        s.undo()
        assert s.plan is before and s.plan == before
        s.redo()
        assert s.plan is new


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(g=graphs(min_steps=2, max_steps=10))
def test_rules_plan_is_legal_and_never_worse_than_none(g):
    # (no compiling: planning only) every group is a legal, analyzable schedule
    s = Session(g, backend="reference")
    s.auto("rules")
    _check_plan_shape(s.plan)
    assert len(s.plan.groups) <= len(g.nodes)
    for gr in s.plan.groups:
        assert gr.schedule.kind in ("elementwise", "row_reduce", "opaque")
        if gr.schedule.kind == "row_reduce":
            assert gr.schedule.mapping in ("block", "thread")
