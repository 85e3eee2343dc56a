"""frontends/rewrites/transpose_chains.py: a transpose of a transpose read as one
transpose of the first's input, an identity dropped (its output's name taken by the
value it stands for), the same outputs bit for bit on fresh random inputs; and the
training import applies it, so BERT-style weight gradients are the GEMM's own result."""
import numpy as np
import torch
import torch.nn.functional as F

import workbench as wb
from workbench.frontends.rewrites.transpose_chains import fold_transpose_chains
from rewrite_checks import same_outputs


def test_weight_gradient_pattern_is_the_gemm_itself():
    # torch's backward: grad = t(t(mm(dY^T, X))), and dX reads W as t(t(W))
    b = wb.GraphBuilder("wgrad")
    x, dy = b.input("x", (8, 6)), b.input("dy", (8, 5))
    w = b.input("w", (5, 6))
    wt = b.transpose(w, perm=[1, 0])
    b.output(b.matmul(x, wt), "y")                           # the forward reads W^T
    b.output(b.matmul(dy, b.transpose(wt, perm=[1, 0])), "dx")   # ... and W back
    gw = b.matmul(b.transpose(dy, perm=[1, 0]), x)
    b.output(b.transpose(b.transpose(gw, perm=[1, 0]), perm=[1, 0]), "grad.w")
    g = b.build()
    f = fold_transpose_chains(g)
    assert [n.op for n in f.nodes].count("transpose") == 2      # W^T, dY^T
    producers = {o: n for n in f.nodes for o in n.outputs}
    assert producers["grad.w"].op == "matmul"
    assert "w" in producers["dx"].inputs
    same_outputs(g, f)


def test_general_permutations_compose_and_fixed_values_are_kept():
    b = wb.GraphBuilder("perm")
    x = b.input("x", (2, 3, 4, 5))
    y = b.transpose(b.transpose(x, perm=[0, 2, 1, 3]), perm=[0, 1, 3, 2])
    b.output(b.relu(y), "y")
    # an identity over an input that is an output stays a pair of transposes
    b.output(b.transpose(b.transpose(x, perm=[1, 0, 2, 3]), perm=[1, 0, 2, 3]), "same")
    g = b.build()
    f = fold_transpose_chains(g)
    ops = [(n.op, dict(n.attrs).get("perm")) for n in f.nodes]
    assert ("transpose", (0, 2, 3, 1)) in ops and len(f.nodes) == 4, ops
    same_outputs(g, f)
    assert fold_transpose_chains(f) is f


def test_training_import_has_no_double_transposes():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.GELU(),
                                torch.nn.Linear(10, 4))
    x, t = torch.randn(3, 6), torch.randn(3, 4)
    g = wb.from_torch(model, (x,), training=True, loss=F.mse_loss, targets=(t,))
    producers = {o: n for n in g.nodes for o in n.outputs}
    for n in g.nodes:
        if n.op == "transpose":
            assert producers.get(n.inputs[0]) is None or \
                producers[n.inputs[0]].op != "transpose", n
    assert producers["grad.0.weight"].op != "transpose"
    out = wb.Session(g, backend="cpu").run({"input": x.numpy(), "target": t.numpy(),
                                            **{k: p.detach().numpy()
                                               for k, p in model.named_parameters()}})
    F.mse_loss(model(x), t).backward()
    for k, p in model.named_parameters():
        np.testing.assert_allclose(out[f"grad.{k}"], p.grad.numpy(), rtol=1e-4, atol=1e-6)
