"""Measured DRAM traffic per kernel, from the GPU's hardware counters (Nsight Compute).

The bytes in a :class:`~workbench.measure.StepMeasurement` are *counted* from the
kernel IR (each input read once, each output written once). This module *measures*
them: ``dram__bytes_read.sum`` and ``dram__bytes_write.sum`` of every generated kernel,
read by Nsight Compute (``ncu``) in a child process, so the two stand side by side
(``dram_read`` / ``dram_written`` beside ``bytes_read`` / ``bytes_written``).

How: the plan is exported as an artifact into a temporary directory, the inputs saved
beside it (``inputs.npz``), and ::

    ncu --csv --print-units base --metrics dram__bytes_read.sum,dram__bytes_write.sum
        --kernel-name-base function --kernel-name regex:^(k0_...|k1_...)$
        --clock-control none --cache-control all --target-processes all
        <python> -m workbench.measure.counters ARTIFACT inputs.npz

runs the artifact once on the GPU (this module's :func:`main`). ncu leaves the clocks
alone (``--clock-control none``) and flushes the caches before each profiled kernel
(its default, ``--cache-control all``: every input comes from DRAM). Only our kernels
are named; library calls (matmul through cuBLAS) are not ours and are not measured.
The CSV is parsed per kernel name (the mean per launch when a kernel ran several
times).

When counters cannot be read -- not a GPU backend, no ncu, ncu refused
(``ERR_NVGPUCTRPERM``: no permission to read the counters), ncu or the child failed or
timed out -- :func:`dram_bytes` raises :class:`CountersUnavailable` with a one-line
reason, and :func:`with_dram` records it: NaN in the columns and
``dram_source = "unavailable: <reason>"``. Counted bytes are never shown as measured.

Example::

    >>> s = Session("sample_graphs/layernorm.json", backend="cupy")    # doctest: +SKIP
    >>> s.auto("rules"); m = s.measure(counters=True)                  # doctest: +SKIP
    >>> m.dram_source, m.per_kernel[["bytes_read", "dram_read"]]       # doctest: +SKIP
    >>> dram_bytes(s)     # {kernel name: (bytes read, bytes written)}  # doctest: +SKIP
"""
from __future__ import annotations

import csv
import dataclasses
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..errors import WorkbenchError
from ..dtypes import DType
from ..ops.bfloat16 import as_bits, bits_as
from ..artifact import export_plan
from ..codegen import lower_plan

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
DEFAULT_TIMEOUT_S = 300.0
# where ncu is looked for after PATH, in order; within a glob, newest version first
NCU_LOCATIONS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu",
                 "/usr/local/cuda-*/bin/ncu")
CHILD_MODULE = "workbench.measure.counters"
SOURCE_NCU = "ncu"
UNAVAILABLE = "unavailable"

_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")
# metric units ncu prints (decimal prefixes; binary ones accepted too)
_UNIT_SCALE = {"": 1.0, "b": 1.0, "byte": 1.0, "bytes": 1.0,
               "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6, "gbyte": 1e9, "gb": 1e9,
               "tbyte": 1e12, "tb": 1e12,
               "kib": 1024.0, "kibyte": 1024.0, "mib": 1024.0 ** 2, "mibyte": 1024.0 ** 2,
               "gib": 1024.0 ** 3, "gibyte": 1024.0 ** 3, "tib": 1024.0 ** 4}


class CountersUnavailable(WorkbenchError):
    """The DRAM counters could not be read here; the message is the one-line reason."""


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


# -- finding ncu ---------------------------------------------------------------------
def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", path))


def find_ncu() -> str | None:
    """The ncu executable: on PATH, else in ``NCU_LOCATIONS`` (newest first); None."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_LOCATIONS:
        for cand in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    return None


# -- the command line ------------------------------------------------------------------
def kernel_regex(names: Sequence[str]) -> str:
    """``regex:^(NAME1|NAME2)$`` for ncu's ``--kernel-name`` (names are sanitized
    identifiers; anything else is refused rather than escaped)."""
    bad = [n for n in names if not _IDENTIFIER.fullmatch(n)]
    if bad or not names:
        raise ValueError(f"kernel names must be [A-Za-z0-9_]+ identifiers, got {list(names)!r}")
    return "regex:^(" + "|".join(names) + ")$"


def ncu_command(ncu: str, artifact: str | Path, inputs: str | Path,
                kernels: Sequence[str], python: str | None = None) -> list[str]:
    """The ncu command line (argv) that profiles ``kernels`` while the child runs the
    artifact once on ``inputs`` (an .npz). Nothing here changes a device setting:
    clocks are left alone, caches are flushed before each profiled kernel (the
    default, so reads come from DRAM)."""
    return [ncu, "--csv", "--print-units", "base", "--metrics", ",".join(METRICS),
            "--kernel-name-base", "function", "--kernel-name", kernel_regex(kernels),
            "--clock-control", "none", "--cache-control", "all",
            "--target-processes", "all",
            python or sys.executable, "-m", CHILD_MODULE, str(artifact), str(inputs)]


def generated_kernels(plan) -> tuple[list[str], list[str]]:
    """(names of the plan's generated kernels, names of its library calls), in order."""
    ours, library = [], []
    for k in lower_plan(plan):
        (library if k.library is not None else ours).append(k.name)
    return ours, library


# -- parsing ncu's CSV -------------------------------------------------------------------
def _number(text: str) -> float:
    t = text.strip().replace(",", "").replace("\u202f", "").replace(" ", "")
    try:
        return float(t)
    except ValueError:
        return float("nan")          # "n/a", empty


def _scale(unit: str) -> float:
    u = unit.strip().lower()
    if u not in _UNIT_SCALE:
        raise ValueError(f"unknown unit {unit!r}")
    return _UNIT_SCALE[u]


def _kernel_base(name: str) -> str:
    """The function name of a "Kernel Name" cell (parameters or templates dropped)."""
    name = name.strip()
    head = name.split("(", 1)[0].strip()
    head = re.sub(r"^void\s+", "", head)
    m = re.match(r"[A-Za-z_][A-Za-z0-9_:]*", head)
    return m.group(0) if m else name


def parse_ncu_csv(text: str, metrics: Sequence[str] = METRICS
                  ) -> dict[str, tuple[float, float]]:
    """Kernel name -> (DRAM bytes read, bytes written) per launch, from ncu ``--csv``
    output (its "details" page: one row per kernel launch and metric, after any
    ``==PROF==`` lines). Values may carry thousands separators and units (byte, Kbyte,
    Mbyte, Gbyte -- decimal -- or KiB-style); a kernel launched several times gets the
    mean per launch. Rows of other metrics are ignored; a launch missing a metric
    gives NaN for it."""
    read_m, write_m = metrics
    header = None
    launches: dict[str, dict[tuple, dict[str, float]]] = {}
    for row in csv.reader(ln for ln in text.splitlines()
                          if ln.strip() and not ln.lstrip().startswith("==")):
        if header is None:
            if {"Kernel Name", "Metric Name", "Metric Value"} <= set(row):
                header = {name: i for i, name in enumerate(row)}
            continue
        if len(row) < len(header):
            continue                 # a line of the program's own output, or truncated
        cell = lambda col: row[header[col]] if col in header else ""
        metric = cell("Metric Name").strip()
        if metric not in (read_m, write_m):
            continue
        try:
            value = _number(cell("Metric Value")) * _scale(cell("Metric Unit"))
        except ValueError:
            value = float("nan")
        name = _kernel_base(cell("Kernel Name"))
        per = launches.setdefault(name, {})
        launch = (cell("Process ID"), cell("ID")) if "ID" in header else (len(per),)
        got = per.setdefault(launch, {})
        got[metric] = got.get(metric, 0.0) + value
    out = {}
    for name, per in launches.items():
        reads = [d.get(read_m, float("nan")) for d in per.values()]
        writes = [d.get(write_m, float("nan")) for d in per.values()]
        out[name] = (float(np.mean(reads)), float(np.mean(writes)))
    return out


def _failure(stdout: str, stderr: str, rc: int | None) -> str:
    """One line saying why ncu gave no counters: its first ==ERROR== line, else the
    child's error, else the last line it printed."""
    lines = [ln.strip() for ln in (stdout + "\n" + stderr).splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("==ERROR=="):
            return "ncu: " + _one_line(ln[len("==ERROR=="):])
    for ln in lines:
        if ln.startswith("error:"):
            return "the profiled run failed: " + _one_line(ln[len("error:"):])
    for ln in reversed(lines):
        if ln.startswith("==WARNING==") or ln.startswith("==PROF=="):
            return "ncu: " + _one_line(ln.split("==", 2)[-1])
    tail = _one_line(lines[-1]) if lines else "no output"
    return f"ncu exited with code {rc}: {tail}"


# -- running ncu ---------------------------------------------------------------------------
def _child_env() -> dict[str, str]:
    """The environment of the profiled child: this workbench importable first."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]]
                                                  if env.get("PYTHONPATH") else []))
    return env


def _run(cmd: list[str], timeout: float, cwd: str) -> subprocess.CompletedProcess:
    """Run ncu in its own process group; on timeout, end that group (ncu and the
    profiled child it started) and report it."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", cwd=cwd, env=_child_env(),
                                start_new_session=True)
    except OSError as e:
        raise CountersUnavailable(f"cannot run {cmd[0]}: {e.strerror or e}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        raise CountersUnavailable(f"ncu did not finish within {timeout:g} s") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _resolve(session_or_plan, inputs, backend):
    if hasattr(session_or_plan, "history") and hasattr(session_or_plan, "plan"):
        s = session_or_plan
        return (s.plan, s.inputs if inputs is None else inputs,
                s.backend if backend is None else backend)
    if inputs is None:
        raise WorkbenchError("dram_bytes(plan, inputs, backend=...): a plan needs its inputs")
    return session_or_plan, inputs, backend


def dram_bytes(session_or_plan, inputs: Mapping[str, np.ndarray] | None = None, *,
               backend=None, timeout: float = DEFAULT_TIMEOUT_S,
               ncu: str | None = None) -> dict[str, tuple[float, float]]:
    """Measured DRAM bytes of each generated kernel of a plan, run once on ``inputs``.

    ``session_or_plan``: a :class:`~workbench.session.Session` (its current plan, its
    inputs and backend) or a :class:`~workbench.fusion.Plan` with ``inputs`` (graph
    input name -> NumPy array) and ``backend`` (the backend the plan runs on; a CUDA
    one is needed). ``ncu`` overrides the search (:func:`find_ncu`); ``timeout``
    bounds the child in seconds.

    Returns kernel name -> (bytes read, bytes written) per launch, for the kernels ncu
    reported (library calls never are). Raises :class:`CountersUnavailable` with a
    one-line reason when nothing could be measured.
    """
    plan, inputs, backend = _resolve(session_or_plan, inputs, backend)
    if (backend is None or getattr(backend, "target", "") != "cuda"
            or getattr(backend, "emulated", False)):
        name = getattr(backend, "name", None) or "none"
        raise CountersUnavailable(f"backend {name} does not run on an NVIDIA GPU; DRAM "
                                  "counters need the cupy backend")
    ncu = ncu or find_ncu()
    if not ncu:
        raise CountersUnavailable("ncu (Nsight Compute) not found on PATH, in "
                                  "/usr/local/cuda/bin, /opt/nvidia/nsight-compute/*/ or "
                                  "/usr/local/cuda-*/bin")
    ours, _library = generated_kernels(plan)
    if not ours:
        raise CountersUnavailable("the plan has no generated kernels (library calls are "
                                  "not measured)")
    with tempfile.TemporaryDirectory(prefix="workbench-ncu-") as tmp:
        artifact = Path(tmp) / "artifact"
        export_plan(plan, artifact, backend=backend)
        npz = Path(tmp) / "inputs.npz"
        # generated keys: graph input names may hold any text; bfloat16 as its bits
        # (an .npz has no bfloat16, and CuPy takes them so)
        np.savez(npz, **{f"i{j}": as_bits(np.ascontiguousarray(inputs[n]))
                         for j, n in enumerate(plan.graph.inputs)})
        cmd = ncu_command(ncu, artifact, npz, ours)
        done = _run(cmd, timeout, tmp)
    counts = {k: v for k, v in parse_ncu_csv(done.stdout).items() if k in ours}
    if not counts:
        raise CountersUnavailable(_failure(done.stdout, done.stderr, done.returncode))
    return counts


# -- into a measurement ----------------------------------------------------------------------
def attach_dram(m, counts: Mapping[str, tuple[float, float]], source: str):
    """``m`` (a StepMeasurement) with ``dram_read``/``dram_written`` filled from
    ``counts`` (NaN for kernels not in it), ``dram_bytes`` (their sum over measured
    kernels; NaN if none) and ``dram_source``."""
    frame = m.per_kernel.copy()
    nan = float("nan")
    frame["dram_read"] = [float(counts.get(k, (nan, nan))[0]) for k in frame["kernel"]]
    frame["dram_written"] = [float(counts.get(k, (nan, nan))[1]) for k in frame["kernel"]]
    both = frame["dram_read"] + frame["dram_written"]
    total = float(both[both.notna()].sum()) if both.notna().any() else nan
    return dataclasses.replace(m, per_kernel=frame, dram_bytes=total, dram_source=source)


def with_dram(m, plan, inputs: Mapping[str, np.ndarray], backend, *,
              timeout: float = DEFAULT_TIMEOUT_S, ncu: str | None = None):
    """``m`` (the StepMeasurement of ``plan``) with measured DRAM bytes, or NaN and
    ``dram_source = "unavailable: <reason>"`` when counters cannot be read here.
    Never raises for a missing GPU, ncu or permission."""
    try:
        counts = dram_bytes(plan, inputs, backend=backend, timeout=timeout, ncu=ncu)
    except CountersUnavailable as e:
        return attach_dram(m, {}, f"{UNAVAILABLE}: {_one_line(str(e))}")
    except (OSError, ValueError, WorkbenchError) as e:   # export or temp dir trouble
        return attach_dram(m, {}, f"{UNAVAILABLE}: {_one_line(f'{type(e).__name__}: {e}')}")
    return attach_dram(m, counts, SOURCE_NCU)


# -- the profiled child ------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """``python -m workbench.measure.counters ARTIFACT INPUTS.npz``: load the artifact
    on the GPU, run it once on the inputs (keys i0, i1, ... in the model's input
    order). Prints nothing on stdout (ncu's CSV goes there); errors go to stderr as
    one line starting ``error:``."""
    import argparse
    p = argparse.ArgumentParser(prog=f"python -m {CHILD_MODULE}",
                                description="run an exported plan once (profiled by ncu)")
    p.add_argument("artifact")
    p.add_argument("inputs", help=".npz with arrays i0, i1, ... in the model's input order")
    p.add_argument("--backend", default="cupy", help="cupy (default); cpu for tests")
    a = p.parse_args(argv)
    try:
        from workbench.artifact import load_artifact
        model = load_artifact(a.artifact, backend=a.backend)
        with np.load(a.inputs, allow_pickle=False) as z:
            arrays = [z[f"i{j}"] for j in range(len(model.inputs))]
        if a.backend != "cupy":       # (CuPy takes bfloat16 as its bits)
            arrays = [bits_as(x, DType(t.dtype)) for x, t in zip(arrays, model.inputs)]
        if a.backend == "cupy":
            import cupy
            arrays = [cupy.asarray(x) for x in arrays]
        model(*arrays)
        if a.backend == "cupy":
            cupy.cuda.Device().synchronize()
    except Exception as e:      # reported as one line: the parent shows it as the reason
        print(f"error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
