"""The kernel-IR printer (``format_kernel``): every kernel the lowering makes prints,
one line per statement at its nesting depth, and model text appears only escaped,
shortened, in a trailing comment.

The structural check walks the IR itself and compares it line by line with the text
(keyword and indentation), so the counts of loads, stores, loops, reductions and grid
barriers in the text are exactly those of the IR.
"""
from __future__ import annotations

import typing
from pathlib import Path

import pytest

from workbench.codegen import format_kernel, lower_group, lower_plan
from workbench.codegen import kir
from workbench.codegen.kernel import Kernel
from workbench.codegen.kir import (Assign, BlockReduce, Comment, DeclareScratch, GridSync, If,
                                   Let, Load, Loop, OncePerBlock, Store)
from workbench.codegen.printer import STATEMENTS, VALUE_CHARS
from workbench.errors import FusionRefused
from workbench.frontends import load
from workbench.fusion import MAPPINGS, Plan, run_planner
from workbench.ir import GraphBuilder
from workbench.device import H100

SAMPLES = sorted(p.name for p in (Path(__file__).parents[2] / "sample_graphs").iterdir()
                 if p.suffix in (".json", ".onnx"))
PLANNERS = ("none", "rules", "stitch")

# the first word a statement prints as (an Assign prints as "<var> =")
_KEYWORD = {Let: "let", Load: "load", Store: "store", Loop: "loop",
            BlockReduce: "block_reduce", OncePerBlock: "once", If: "if",
            GridSync: "grid_sync", Comment: "#", DeclareScratch: "scratch",
            kir.Gemm: "gemm", kir.ThreadTile: "for each", kir.OnlineStep: "online"}


def _sample(name: str):
    return load(str(Path(__file__).parents[2] / "sample_graphs" / name))


def _walk(body, depth=0):
    """(depth, statement) for every statement, nested bodies in order."""
    for s in body:
        yield depth, s
        if isinstance(s, (Loop, OncePerBlock, If, kir.ThreadTile)):
            yield from _walk(s.body, depth + 1)


def _body_lines(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[lines.index("body:") + 1:]


def check_structure(k: Kernel) -> str:
    """Print k and check the text against the IR; returns the text."""
    text = format_kernel(k)
    assert text == format_kernel(k)                  # a pure function of the kernel
    lines = text.split("\n")
    assert text.splitlines() == lines                # no stray line breaks of any kind
    assert all(line.isprintable() for line in lines)
    assert lines[0] == f"kernel {k.name}  group {k.group}  {k.schedule}"
    assert lines[1] == "params:"
    params = lines[2:2 + len(k.params)]
    for b, line in zip(k.params, params):
        role = "workspace" if b.workspace else "out" if b.is_output else "in"
        assert line.split()[:2] == [role, f"{b.name}:"], line
        assert f"[{b.numel}]" in line
        note = line.partition("  # ")[2]
        assert 0 < len(note) <= VALUE_CHARS, line
    if k.library is not None:
        assert lines[-1].startswith(f"library {k.library.op}(")
        assert "body:" not in lines
        return text
    assert f"launch: {k.launch}  shared={k.launch.shared_bytes} B" in lines
    body = _body_lines(text)
    stmts = list(_walk(k.body))
    assert len(body) == len(stmts), "one line per statement"
    for (depth, s), line in zip(stmts, body):
        stripped = line.lstrip(" ")
        assert len(line) - len(stripped) == 2 * (depth + 1), (line, depth)
        word = f"{s.var} =" if isinstance(s, Assign) else _KEYWORD[type(s)]
        assert stripped.startswith(word + " ") or stripped == word \
            or stripped.startswith(word + ":"), (line, s)
    count = lambda t: sum(isinstance(s, t) for _, s in stmts)
    word_count = lambda w: sum(line.lstrip().startswith(w + " ") or line.strip() == w
                               for line in body)
    assert word_count("load") == count(Load) and word_count("store") == count(Store)
    assert word_count("loop") == count(Loop)
    assert word_count("block_reduce") == count(BlockReduce)
    assert text.count("grid_sync") == count(GridSync)
    assert sum(" reduce(" in line for line in body) == sum(
        isinstance(s, Loop) and s.reduction is not None for _, s in stmts)
    return text


# -- every kernel of every sample -------------------------------------------------------

@pytest.mark.parametrize("planner", PLANNERS)
@pytest.mark.parametrize("sample", SAMPLES)
def test_every_sample_kernel_prints(sample, planner):
    plan, _ = run_planner(planner, _sample(sample))
    for k in lower_plan(plan):
        text = check_structure(k)
        for b in k.params:
            assert b.name in text


@pytest.mark.parametrize("planner", PLANNERS)
@pytest.mark.parametrize("sample", SAMPLES)
def test_every_row_kernel_prints_under_every_mapping(sample, planner):
    plan, _ = run_planner(planner, _sample(sample))
    for gr in plan.groups:
        if gr.schedule.kind != "row_reduce":
            continue
        for m in MAPPINGS:
            try:
                mapped = plan.set_mapping(gr.id, m)
            except FusionRefused:
                continue
            new = next(x for x in mapped.groups if set(x.nodes) == set(gr.nodes))
            k = lower_group(mapped.graph, new, H100)
            text = check_structure(k)
            assert str(k.launch) in text
            if m == "split":
                assert "grid_sync" in text and "workspace" in text
                assert text.count("grid_sync") == k.grid_barriers
            if m == "warp":
                # one warp per row, reduced by warp shuffles
                assert "(warp, slot" in text and "(block, slot" not in text
                assert any(line.startswith("  loop row in ") and " warp" in line
                           for line in text.splitlines())


# -- what the text says -----------------------------------------------------------------

def test_layernorm_under_rules():
    plan, _ = run_planner("rules", _sample("layernorm.json"))
    (k,) = lower_plan(plan)
    text = check_structure(k)
    lines = text.splitlines()
    for b in k.params:
        assert b.name in text
    assert "  in        in0: f32[4194304]  # x" in lines
    assert "  out       out0: f32[4194304]  # y" in lines
    rows = [line for line in lines if line.lstrip().startswith("loop row")]
    assert rows == ["  loop row in [0, 4096) grid:"]
    assert sum(line.lstrip().startswith("block_reduce") for line in lines) == 2
    assert sum(" reduce(+: acc" in line for line in lines) == 2
    assert "    loop col in [0, 1024) block reduce(+: acc0):" in lines
    assert "      load t1 = in0[row * 1024 + col]" in lines
    assert "    block_reduce acc0 (block, slot 0)" in lines
    assert "grid_sync" not in text
    assert lines[-1].lstrip().startswith("store out0[row * 1024 + col] = ")


def test_split_mapping_shows_its_passes_and_barriers():
    plan, _ = run_planner("rules", _sample("layernorm.json"))
    k = lower_plan(plan.set_mapping("k0", "split"))[0]
    text = check_structure(k)
    assert k.launch.cooperative and "cooperative" in text
    body = _body_lines(text)
    top = [line.strip() for line in body if not line.startswith("    ")]
    # three passes over the rows, a barrier after each of the first two
    assert [t.split("  #")[0] for t in top] == [
        "loop vb in [0, 8192) grid:", "grid_sync", "loop vb in [0, 8192) grid:",
        "grid_sync", "loop vb in [0, 8192) grid:"]
    assert any(line.strip().startswith("loop col in [part * 512, ") for line in body)
    assert "  workspace ws_part0: f32[8192]  # part0" in text.splitlines()


def _phases_and_syncs(text: str) -> list[str]:
    return [line.strip().split(":")[0] for line in _body_lines(text)
            if line.startswith("  # phase") or line.strip().startswith("grid_sync")]


def test_stitched_kernels_show_grid_syncs_between_phases():
    # global scheme on LayerNorm's mean: two phases with a barrier between them
    plan, _ = run_planner("rules", _sample("layernorm.json"))
    g = plan.graph
    mean = g.node("n0").outputs[0]
    k = lower_plan(plan.set_scheme(mean, "global"))[0]
    text = check_structure(k)
    assert k.phases == 2 and "stitched" in text.splitlines()[0]
    assert _phases_and_syncs(text) == ["# phase 0", "grid_sync  # phase 1 reads t1",
                                       "# phase 1"]
    # the mean crosses the barrier through the kernel's workspace
    assert "  workspace ws0: f32[4096]  # t1" in text.splitlines()
    assert "      store ws0[row] = acc0" in text.splitlines()

    # cross entropy fused whole: its phases in order, a barrier before each that reads
    g = _sample("cross_entropy.json")
    k = lower_plan(Plan.singletons(g, H100).fuse([n.id for n in g.nodes]))[0]
    text = check_structure(k)
    assert k.phases == 4 and k.grid_barriers == 3
    assert [x.split("  #")[0] for x in _phases_and_syncs(text)] == [
        "# phase 0", "grid_sync", "# phase 1", "grid_sync", "# phase 2", "grid_sync",
        "# phase 3"]


def test_model_text_is_escaped_shortened_and_only_in_comments():
    evil_x = "x\n*/evil"
    evil_g = "g\u202e\x1b[31m" + "z" * 60          # bidi override, ESC, long
    evil_y = "y\r\n#include <stdio.h>\u2028"
    b = GraphBuilder("evil")
    x = b.input(evil_x, (4, 8))
    y = b.layer_norm(b.exp(x), b.input(evil_g, (8,)), b.input("b", (8,)))
    b.output(y, evil_y)
    g = b.build()
    seen = set()
    for planner in PLANNERS:
        plan, _ = run_planner(planner, g)
        for k in lower_plan(plan):
            text = check_structure(k)
            for raw in (evil_x, evil_g, evil_y, "\n*/", "\x1b", "\u202e", "\r", "\u2028"):
                assert raw not in text
            for line in text.splitlines():
                code, _, note = line.partition("  # ")
                assert "evil" not in code and "zzz" not in code and "stdio" not in code
                if "\\" in note:
                    assert len(note) <= VALUE_CHARS
                    seen.add(note)
    assert "x\\n*/evil" in seen
    assert any(n.startswith("g\\u202e\\x1b[31mzzz") and n.endswith("…") for n in seen)
    assert any(n.startswith("y\\r\\n#include") for n in seen)


def test_every_statement_type_has_a_printer_and_unknown_ones_do_not_raise():
    assert set(typing.get_args(kir.Stmt)) == set(STATEMENTS)

    class Future:                                   # a statement type added later
        pass

    plan, _ = run_planner("rules", _sample("softmax.json"))
    k = lower_plan(plan)[0]
    odd = Kernel(k.name, k.group, k.schedule, k.params,
                     (Loop("row", 3, "grid", (Future(),)),), k.launch)
    assert format_kernel(odd).splitlines()[-2:] == ["  loop row in [0, 3) grid:",
                                                    "    ? Future"]
