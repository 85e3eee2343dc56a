"""ir/constant_folding.py: ops on constants alone computed once at import, by each
op's NumPy reference, so the graph's outputs are the same bit for bit; broadcasts,
graph outputs and second copies of large shared weights left as they are; both
frontends apply it, so a convolution's BatchNorm and ReLU imported from PyTorch join
the convolution's kernel."""
import numpy as np
import pytest

import workbench as wb
from workbench.ir.composites import batch_norm
from workbench.frontends.rewrites.constant_folding import SHARED_LIMIT, fold_constants
from rewrite_checks import same_outputs

RNG = np.random.default_rng(0)


def _const(b, shape, name):
    return b.constant(RNG.uniform(0.5, 2.0, shape).astype(np.float32), name)


def test_parameter_arithmetic_becomes_constants_with_the_same_values():
    b = wb.GraphBuilder("bn")
    x = b.input("x", (2, 6, 5, 5))
    y = batch_norm(b, x, *(_const(b, (6,), n) for n in ("s", "bias", "m", "v")), eps=1e-3)
    b.output(b.relu(y), "y")
    g = b.build()
    f = fold_constants(g)
    assert [n.op for n in f.nodes] == ["sub", "mul", "add", "relu"]
    assert set(f.constants) == {n.inputs[1] for n in f.nodes[:3]}
    assert all(f.value(c).shape == (1, 6, 1, 1) for c in f.constants)
    same_outputs(g, f)


def test_broadcasts_outputs_and_shared_large_weights_are_left():
    b = wb.GraphBuilder("left")
    x = b.input("x", (4, 8))
    small = _const(b, (1, 8), "small")
    big = _const(b, (SHARED_LIMIT // 8 + 1, 8), "big")       # tied: read twice
    wide = b.op("expand", small, shape=[4, 8])                # a broadcast
    b.output(x * wide, "scaled")
    b.output(b.exp(small), "exp_small")                        # a graph output
    b.output(b.matmul(x, b.transpose(big, perm=[1, 0])), "logits")
    b.output(b.gather(big, b.constant(np.array([0, 2], np.int64), "ids"), axis=0), "rows")
    g = b.build()
    assert fold_constants(g) is g


def test_a_weight_read_once_is_transposed_once():
    b = wb.GraphBuilder("t")
    x = b.input("x", (4, 8))
    w = _const(b, (SHARED_LIMIT // 8 + 1, 8), "w")
    b.output(b.matmul(x, b.transpose(w, perm=[1, 0])), "y")
    g = b.build()
    f = fold_constants(g)
    (mm,) = f.nodes
    assert mm.op == "matmul" and "w" not in f.constants
    assert np.array_equal(f.constants[mm.inputs[1]], g.constants["w"].T)


def test_conv_batchnorm_relu_from_torch_plans_to_one_kernel():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(8), torch.nn.ReLU())
    with torch.no_grad():       # statistics that are not the identity
        block[1].running_mean.uniform_(-1, 1)
        block[1].running_var.uniform_(0.5, 2)
    block.eval()
    x = torch.randn(2, 3, 12, 12)
    g = wb.from_torch(block, (x,))
    assert [n.op for n in g.nodes] == ["conv2d", "sub", "mul", "add", "relu"]
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    assert len(s.plan.groups) == 1, s.plan.describe()
    y = s.program().run({g.inputs[0]: x.numpy()})
    with torch.no_grad():
        want = block(x).numpy()
    (out,) = g.outputs
    assert np.abs(y[out] - want).max() <= 1e-5 * np.abs(want).max()
