"""Fixtures for the notebook app tests: small real graphs (fast to compile and run on
the cpu backend) and a graph of ~500 nodes for drawing."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_graphs"))
from make_samples import block_chain  # noqa: E402


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
