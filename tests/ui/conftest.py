"""Fixtures for the notebook app tests: small real graphs (fast to compile and run on
the cpu backend) and a graph of ~500 nodes for drawing."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.ir import GraphBuilder


def block_chain(blocks: int, rows: int = 32, cols: int = 64, name: str = "chain"):
    """``blocks`` x (LayerNorm -> GELU -> residual add): 15 nodes per block."""
    b = GraphBuilder(name)
    x = b.input("x", (rows, cols))
    rng = np.random.default_rng(0)
    for i in range(blocks):
        gamma = b.constant(rng.uniform(0.5, 1.5, cols).astype(np.float32), f"gamma{i}")
        beta = b.constant(rng.uniform(-0.5, 0.5, cols).astype(np.float32), f"beta{i}")
        x = b.gelu(b.layer_norm(x, gamma, beta, source=f"block{i}/ln"),
                   source=f"block{i}/gelu") + x
    b.output(x, "y")
    return b.build()


@pytest.fixture(scope="session")
def small_graph():
    """LayerNorm -> GELU -> add (15 nodes), [32, 64]."""
    return block_chain(1)


@pytest.fixture(scope="session")
def big_graph():
    """34 blocks: 510 nodes."""
    return block_chain(34, name="big")


@pytest.fixture
def app(small_graph):
    from workbench.session import Session
    from workbench.ui import WorkbenchApp
    return WorkbenchApp(Session(small_graph, backend="cpu"))
