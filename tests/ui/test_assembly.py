"""Compiler Explorer's details: a kernel's exact compile command (run here, it builds
the kernel) and its assembly -- the C compiler's -S output, NVRTC's PTX -- from Python
and in the code panel's Assembly tab, made only when asked."""
from __future__ import annotations

import ctypes
import shlex
import subprocess

import pytest

from workbench.errors import WorkbenchError
from workbench.ir import GraphBuilder
from workbench.session import Session
from workbench.ui import WorkbenchApp


@pytest.fixture
def session(small_graph):
    s = Session(small_graph, backend="cpu")
    s.auto("rules")
    return s


def test_the_compile_command_is_the_one_that_builds_the_kernel(session, tmp_path):
    """Run the command shown, in a fresh directory: it builds a library exporting the
    kernel, with every flag the backend uses."""
    k = session.kernel("n0")
    line = session.compile_command("n0")
    argv = shlex.split(line)
    assert "-O3" in argv and "-march=native" in argv and "-fopenmp" in argv
    assert f"{k.name}.c" in argv and argv[argv.index("-o") + 1] == f"{k.name}.so"
    (tmp_path / f"{k.name}.c").write_text(session.backend.render(k))
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lib = ctypes.CDLL(str(tmp_path / f"{k.name}.so"))
    assert hasattr(lib, k.name)


def test_extra_flags_show_in_the_command(session, monkeypatch):
    monkeypatch.setenv("WB_EXTRA_CFLAGS", "-DWB_SHOWN_FLAG=1 -g")
    argv = shlex.split(session.compile_command("n0"))
    assert argv[argv.index("-DWB_SHOWN_FLAG=1") + 1] == "-g"


def test_cpu_assembly_is_the_compilers_and_cached(session):
    k = session.kernel("n0")
    asm = session.assembly("n0")
    assert f"\n{k.name}:" in asm or asm.startswith(f"{k.name}:")
    assert ".cfi_" not in asm and ".loc" not in asm          # directives filtered
    raw = session.assembly("n0", filtered=False)
    assert ".cfi_" in raw or ".ident" in raw
    # the kernel's vectorized float adds: an x86 add instruction in its text
    assert any(ins in asm for ins in ("addps", "addss", "fadd"))
    assert session.assembly("n0") == asm                      # (cached: the same text)


def test_ptx_and_nvrtc_options(session, nvrtc_toolchain):
    k = session.kernel("n0")
    line = session.compile_command("n0", target="cuda")
    assert line.startswith(f"nvrtcCompileProgram {k.name}.cu --std=c++17 -arch=sm_90")
    ptx = session.assembly("n0", target="cuda")
    assert f".visible .entry {k.name}(" in ptx and ".target sm_90" in ptx
    assert "ld.global" in ptx and "st.global" in ptx


def test_library_kernels_and_bad_targets_are_refused_with_the_reason():
    b = GraphBuilder("prefix")          # a running sum: a library call (NumPy's)
    x = b.input("x", (8, 50))
    b.output(b.op("cumsum", x, axis=1), "y")
    s = Session(b.build(), backend="cpu")
    assert s.kernel("n0").library is not None
    with pytest.raises(WorkbenchError, match="library call.*select a generated kernel"):
        s.assembly("n0")
    with pytest.raises(WorkbenchError, match="library call"):
        s.compile_command("n0")
    with pytest.raises(WorkbenchError, match="unknown target 'sass'.*'c'.*'cuda'"):
        s.assembly("n0", target="sass")


def test_the_assembly_tab_compiles_only_when_opened(small_graph, nvrtc_toolchain):
    app = WorkbenchApp(Session(small_graph, backend="cpu"))
    app.auto("rules")
    app.selected = ["n3"]
    asm = app.code.asm
    assert app.code.tabs.titles[-1] == "Assembly"
    assert asm.kernel is not None and asm.assembly == ""       # nothing compiled yet
    assert "open this tab" in asm.children[2].value
    app.code.tabs.selected_index = app.code.tabs.titles.index("Assembly")
    k = app.session.kernel("n3")
    assert asm.command == app.session.compile_command("n3")
    assert asm.assembly == app.session.assembly("n3") and 'class="wb-code"' in asm.children[2].value
    asm.target.value = "GPU (NVRTC PTX)"
    assert asm.command.startswith(f"nvrtcCompileProgram {k.name}.cu")
    assert f".visible .entry {k.name}(" in asm.assembly
    # another kernel while the tab is open: filled at once
    app.selected = ["n0"]
    assert asm.kernel is not None and asm.assembly != ""
    app.code.tabs.selected_index = 0
    assert asm.active is False
