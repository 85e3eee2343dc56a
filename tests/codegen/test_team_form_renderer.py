"""A C kernel's team form (``<name>_team``, render/c.py ``CRenderer.kernel``) is printed
by the renderer in use: a subclass of ``CRenderer`` that prints a statement its own way
prints it so in the team function too. (The team body was once printed by a fresh
``TeamC()``, so a subclass's overrides reached only kernels without a team form.)

The subclass's program is compiled and run on fresh random inputs, outputs poisoned
first, against the NumPy reference and bit for bit against the stock renderer's."""
from pathlib import Path

import numpy as np

import workbench as wb
from workbench.codegen.render import RENDERERS
from workbench.codegen.render.c import CRenderer, team_form, team_symbol
from workbench.runtime import random_inputs, run_reference
from workbench.runtime.program import Program
from workbench.tolerance import max_rel_error, tolerance

SAMPLES = Path(__file__).resolve().parents[2] / "sample_graphs"
MARK = "/* tagged store */"


class _TaggedStores(CRenderer):
    """The C renderer with a comment after every store: one printing method changed."""

    def store(self, s) -> str:
        line = super().store(s)
        return line and f"{line} {MARK}"


def _team_body(source: str, name: str) -> str:
    """The team function's definition: the source after its declaration's second
    mention (kernel() declares it, calls it, then defines it)."""
    head = f"void {team_symbol(name)}("
    assert source.count(head) == 2, source[:400]
    return source.split(head)[2]


def test_a_subclass_s_printing_reaches_the_team_form_and_runs():
    s = wb.Session(str(SAMPLES / "layernorm.json"), backend="cpu")
    s.auto("none")      # op by op: a stretch of team kernels the driver runs in one region
    kernels = s.kernels()
    teams = [k for k in kernels if team_form(k)]
    assert len(teams) >= 2, [k.name for k in kernels]
    tagged = _TaggedStores()
    for k in teams:
        body = _team_body(tagged.kernel(k), k.name)
        assert MARK in body, body[:400]
        assert "#pragma omp for" in body and "#pragma omp parallel for" not in body
        assert MARK not in RENDERERS["c"].kernel(k)
    # the sources compiled as a program, each team kernel through its team function
    sources = {k.name: tagged.source(k) for k in kernels}
    compiled = s.backend.compile_sources(kernels, sources)
    assert all(ck.team_fn is not None for ck, k in zip(compiled, kernels) if team_form(k))
    prog = Program(s.plan, s.backend, kernels=kernels, compiled=compiled)
    stock = s.program()
    for seed in (1, 2):
        ins = random_inputs(s.graph, seed)
        got, want = prog.run(ins, checked=True), run_reference(s.graph, ins)
        same = stock.run(ins, checked=True)
        for o in s.graph.outputs:
            assert max_rel_error(got[o], want[o]) <= tolerance(s.graph.value(o).dtype), o
            assert np.array_equal(got[o], same[o]), o
