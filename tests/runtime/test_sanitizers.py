"""Generated C under AddressSanitizer and UndefinedBehaviorSanitizer (issue 11).

``scripts/sanitize.py`` runs in a child Python with the ASan runtime preloaded and
``$WB_EXTRA_CFLAGS`` adding ``-fsanitize=address,undefined,float-cast-overflow`` to the
kernels' real flags; it builds every sample graph's kernels (and small graphs at the
edges of the integer and float semantics) under several planners, runs them and
compares with the NumPy reference. A sanitizer error aborts the child; its report is
the failure message here.

These tests skip only where the compiler cannot build and load a sanitized library --
unless ``WB_REQUIRE_SANITIZERS=1`` (``.ci/run``), where that is a failure: a check that
did not run must not pass. A broken hand-written kernel, built the same way, must be
caught (so the check cannot pass by checking nothing).
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from budget import sample
from workbench.errors import WorkbenchError
from workbench.runtime import calibrate, cc

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "scripts" / "sanitize.py"


def _script():
    spec = importlib.util.spec_from_file_location("_wb_sanitize_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sanitize = _script()


@pytest.fixture(scope="module")
def sanitizer_env():
    """The child's environment; skips (fails under WB_REQUIRE_SANITIZERS) where the
    compiler cannot build and load a sanitized library."""
    why = sanitize.unavailable()
    if why:
        if os.environ.get("WB_REQUIRE_SANITIZERS"):
            pytest.fail(f"WB_REQUIRE_SANITIZERS is set but {why}")
        pytest.skip(why)
    return sanitize.sanitizer_env()


# slow: a child Python with the ASan runtime preloaded, every sample graph's kernels built
# sanitized (the tests of $WB_EXTRA_CFLAGS below build one small library: fast tier)
SANITIZED = pytest.mark.slow


def _run(env, *args, timeout):
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _report(r) -> str:
    """The child's exit status, the end of its summary and the last 60 lines of stderr
    (where a sanitizer writes its report)."""
    err = "\n".join(r.stderr.splitlines()[-60:])
    out = "\n".join(r.stdout.splitlines()[-30:])
    return f"exit status {r.returncode}\n-- stdout (end):\n{out}\n-- stderr (last 60 lines):\n{err}"


@SANITIZED
def test_generated_kernels_are_clean_under_asan_and_ubsan(sanitizer_env):
    # every edge and CNN graph; of the sample graphs a seeded sample (tests/budget.py:
    # WB_FULL_TESTS=1 all of them; `python scripts/sanitize.py` runs them all)
    samples = sample(sorted(p.name for p in (ROOT / "sample_graphs").iterdir()
                            if p.suffix in (".json", ".onnx")), 8, "sanitize")
    edges = ["int_edges_int32", "int_edges_int64", "float_casts", "gather_int64",
             "gather_int32", "reduce_empty", "float16_edges"]
    shapes = ["mbconv_4x4", "stem_23x21"]   # a MobileNetV2 block, ResNet's stem + max pool
    r = _run(sanitizer_env, "--only", *samples, *edges, *shapes, timeout=900)
    assert r.returncode == 0, _report(r)
    lines = r.stdout.splitlines()
    assert any("-fsanitize=address,undefined" in ln for ln in lines), _report(r)
    # one summary line per graph and planner: each sample graph under none, rules and
    # stitch (run, or the same kernels as a planner run before it), the edge and CNN
    # graphs under every planner
    expected = [(s, p) for s in samples for p in ("none", "rules", "stitch")] + \
        [(e, p) for e in edges + shapes for p in ("none", "xla", "rules", "stitch")]
    for name, planner in expected:
        pat = re.compile(rf"^sanitize ok +{re.escape(name)} +{planner} ")
        assert any(pat.match(ln) for ln in lines), f"no line for {name} / {planner}\n" \
            + _report(r)
    # most sample graphs ran their own kernels under each planner (not all "same as")
    ran = [ln for ln in lines if ln.startswith("sanitize ok") and "kernels=" in ln]
    assert len(ran) >= 2 * len(samples) + 4 * len(edges), _report(r)
    assert re.search(r"^sanitize: \d+ graph/planner runs, 0 failed", r.stdout, re.M), \
        _report(r)


@SANITIZED
@pytest.mark.parametrize("kind, message", [
    ("oob", "ERROR: AddressSanitizer: heap-buffer-overflow"),
    ("overflow", "runtime error: signed integer overflow"),
])
def test_a_broken_kernel_is_caught(sanitizer_env, kind, message):
    """A hand-written kernel writing one element past its output (ASan) or overflowing
    a signed int (UBSan), built like every kernel in the same child: it must abort with
    the sanitizer's report, or the clean run above proves nothing."""
    r = _run(sanitizer_env, "--selftest", kind, timeout=300)
    assert r.returncode != 0, _report(r)
    assert message in r.stderr, _report(r)
    assert f"wb_selftest_{kind}" in r.stderr, _report(r)     # the frame that did it
    assert "NOT caught" not in r.stdout, _report(r)


@SANITIZED
def test_the_child_refuses_to_run_without_the_sanitizers(sanitizer_env):
    """Started as the child but without the ASan runtime, it says so (exit 3) instead
    of checking unsanitized kernels and passing."""
    env = dict(sanitizer_env)
    env.pop("LD_PRELOAD")
    r = _run(env, "--only", "softmax.json", timeout=300)
    assert r.returncode == 3 and "not running under the sanitizers" in r.stderr, _report(r)


# -- the hook: $WB_EXTRA_CFLAGS (no sanitizer needed) ---------------------------------

SRC = "#ifndef WB_X\n#define WB_X 1\n#endif\nint wb_x(void) { return WB_X; }\n"


def _call(path) -> int:
    fn = ctypes.CDLL(str(path)).wb_x
    fn.restype = ctypes.c_int
    return fn()


def test_extra_cflags_are_compiled_in_and_keep_their_own_cache_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    monkeypatch.delenv("WB_EXTRA_CFLAGS", raising=False)
    plain = cc.build_library("wb_x", SRC)
    monkeypatch.setenv("WB_EXTRA_CFLAGS", "-DWB_X=42")
    assert cc.cflags()[-1] == "-DWB_X=42"
    extra = cc.build_library("wb_x", SRC)
    assert extra != plain and _call(extra) == 42 and _call(plain) == 1
    # split as a shell would; flags that join to the same text are other keys
    monkeypatch.setenv("WB_EXTRA_CFLAGS", "'-DWB_X=(40 + 3)'")
    assert cc.extra_cflags() == ("-DWB_X=(40 + 3)",)
    third = cc.build_library("wb_x", SRC)
    assert _call(third) == 43 and third not in (plain, extra)
    # without the variable, the library built without it (the same cache entry as
    # before the variable existed: the key of the backend's own flags is unchanged)
    monkeypatch.delenv("WB_EXTRA_CFLAGS")
    assert cc.build_library("wb_x", SRC) == plain
    # the CPU probe leaves them out
    monkeypatch.setenv("WB_EXTRA_CFLAGS", "-DWB_X=42")
    assert cc.build_library("wb_x", SRC, extra=False) == plain


def test_extra_cflags_leave_the_device_alone_and_key_the_tuning_cache(monkeypatch):
    from workbench.measure.tune import tuning_key
    monkeypatch.delenv("WB_EXTRA_CFLAGS", raising=False)
    key = calibrate._machine_key()
    cpu, gpu = tuning_key("void k(void) {}", "cpu"), tuning_key("k", "cupy")
    monkeypatch.setenv("WB_EXTRA_CFLAGS", "-fsanitize=address")
    # the device plans are made for is this machine, however kernels are checked ...
    assert calibrate._machine_key() == key
    # ... but sanitized timings are not a kernel's timings (on the CPU)
    assert tuning_key("void k(void) {}", "cpu") != cpu
    assert tuning_key("k", "cupy") == gpu


def test_malformed_extra_cflags_are_a_clear_error(monkeypatch):
    monkeypatch.setenv("WB_EXTRA_CFLAGS", "-DX='unterminated")
    with pytest.raises(WorkbenchError, match="WB_EXTRA_CFLAGS is not a valid list"):
        cc.cflags()
