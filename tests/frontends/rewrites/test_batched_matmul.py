"""ir/batched_matmul.py: a matmul over batch x heads merged by reshapes (as
torch.export decomposes attention) folded into one matmul over the original axes --
the same values, bit for bit, on fresh random inputs -- and left alone where the
reshapes merge anything else; from_torch applies it, so attention imported from
PyTorch plans to a fused attention kernel as its ONNX export does."""
import numpy as np
import pytest

import workbench as wb
from workbench.frontends.rewrites.batched_matmul import fold_batch_reshapes
from rewrite_checks import same_outputs


def _attention(b=2, h=3, s=5, d=4, scores_out=False):
    """softmax(q kᵀ) v as from_torch imports it: each operand's batch and heads merged
    by a reshape, bmm, the result's split again."""
    g = wb.GraphBuilder("bmm_attention")
    q, kt = g.input("q", (b, h, s, d)), g.input("kt", (b, h, d, s))
    v = g.input("v", (b, h, s, d))
    scores = g.reshape(g.matmul(g.reshape(q, shape=[b * h, s, d]),
                                g.reshape(kt, shape=[b * h, d, s])), shape=[b, h, s, s])
    p = g.softmax(scores * 0.5, axis=-1)
    o = g.reshape(g.matmul(g.reshape(p, shape=[b * h, s, s]),
                           g.reshape(v, shape=[b * h, s, d])), shape=[b, h, s, d])
    g.output(o, "o")
    if scores_out:
        g.output(scores, "scores")
    return g.build()


@pytest.mark.parametrize("scores_out", [False, True])
def test_bmm_over_merged_axes_becomes_one_batched_matmul(scores_out):
    g = _attention(scores_out=scores_out)
    f = fold_batch_reshapes(g)
    mms = [n for n in f.nodes if n.op == "matmul"]
    assert len(mms) == 2 and all(len(f.value(n.outputs[0]).shape) == 4 for n in mms)
    # no reshape left between the products and the softmax; only the graph outputs'
    # (the same shape as their input: reshapes that are kept for their names)
    assert all(n.outputs[0] in g.outputs for n in f.nodes if n.op == "reshape")
    assert [n.id for n in f.nodes] == [f"n{i}" for i in range(len(f.nodes))]
    same_outputs(g, f)


def test_other_merges_are_left_alone():
    g = wb.GraphBuilder("not_batch")
    x, y = g.input("x", (2, 3, 4, 5)), g.input("y", (3, 2, 5, 6))
    z, w = g.input("z", (6, 5, 4)), g.input("w", (2, 3, 4, 5))
    # different leading axes; a 3-D operand that is no reshape; one reshaped from
    # 3-D; a reshape that moves elements across the last two axes
    a = g.matmul(g.reshape(x, shape=[6, 4, 5]), g.reshape(y, shape=[6, 5, 6]))
    b = g.matmul(g.reshape(x, shape=[6, 4, 5]), z)
    c = g.matmul(g.reshape(x, shape=[6, 4, 5]), g.reshape(z, shape=[6, 5, 4]))
    d = g.matmul(g.reshape(x, shape=[6, 4, 5]), g.reshape(w, shape=[6, 5, 4]))
    g.output(a, "a")
    g.output(b, "b")
    g.output(c, "c")
    g.output(d, "d")
    built = g.build()
    assert fold_batch_reshapes(built) is built


def test_attention_from_torch_plans_to_a_fused_attention_kernel():
    torch = pytest.importorskip("torch")

    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            b, h, s, d = q.shape
            w = torch.bmm(q.reshape(b * h, s, d), k.transpose(2, 3).reshape(b * h, d, s))
            p = torch.softmax(w.view(b, h, s, s) * d ** -0.5, dim=-1)
            o = torch.bmm(p.view(b * h, s, s), v.reshape(b * h, s, d)).view(b, h, s, d)
            return o.transpose(1, 2).reshape(b, s, h * d)      # the heads merged back

    args = tuple(torch.randn(2, 4, 24, 16) for _ in range(3))
    g = wb.from_torch(Attention(), args)
    assert [len(g.value(n.outputs[0]).shape) for n in g.nodes if n.op == "matmul"] == [4, 4]
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    assert any(gr.schedule.then is not None for gr in s.plan.groups), s.plan.describe()
    y = s.program().run({n: a.numpy() for n, a in zip(g.inputs, args)})
    want = Attention()(*args).numpy()
    (out,) = g.outputs
    assert np.abs(y[out] - want).max() <= 1e-5 * np.abs(want).max()
