"""Measured DRAM bytes from Nsight Compute: parsing its CSV, the command line built for a
plan, every way counters can be unavailable (NaN and a reason, never a crash, never
counted bytes shown as measured), the pipeline through a stand-in ncu, and on a GPU
with ncu the measured bytes of LayerNorm against the counted ones."""
from __future__ import annotations

import math
import re
import stat
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.ir import GraphBuilder
from workbench.measure import counters
from workbench.measure.counters import (CountersUnavailable, dram_bytes, find_ncu,
                                        generated_kernels, kernel_regex, ncu_command,
                                        parse_ncu_csv, with_dram)
from workbench.runtime import gpu_available
from workbench.session import STEP_COLUMNS, Session

ROOT = Path(__file__).resolve().parents[2]
READ, WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name",'
          '"Metric Unit","Metric Value"')


def _row(launch, kernel, metric, unit, value, block="(256, 1, 1)", grid="(4096, 1, 1)"):
    return (f'"{launch}","41207","python3.12","127.0.0.1","{kernel}","1","7","{block}",'
            f'"{grid}","0","9.0","Command line profiler metrics","{metric}","{unit}",'
            f'"{value}"')


# what `ncu --csv --metrics dram__bytes_read.sum,dram__bytes_write.sum ...` prints (the
# "details" page: ==PROF== progress lines, then one quoted row per launch and metric);
# k0 launched once, k1 twice; auto-scaled units and thousands separators
NCU_SAMPLE = "\n".join([
    "==PROF== Connected to process 41207 (/usr/bin/python3.12)",
    '==PROF== Profiling "k0_reduce_mean_sub_mul_etc" - 0: 0%....50%....100% - 1 pass',
    '==PROF== Profiling "k1_exp_div" - 1: 0%....50%....100% - 1 pass',
    '==PROF== Profiling "k1_exp_div" - 2: 0%....50%....100% - 1 pass',
    "==PROF== Disconnected from process 41207",
    HEADER,
    _row(0, "k0_reduce_mean_sub_mul_etc", READ, "Mbyte", "16.79"),
    _row(0, "k0_reduce_mean_sub_mul_etc", WRITE, "byte", "16,777,216"),
    _row(1, "k1_exp_div", READ, "Kbyte", "409.60", grid="(100, 1, 1)"),
    _row(1, "k1_exp_div", WRITE, "Kbyte", "409.60", grid="(100, 1, 1)"),
    _row(2, "k1_exp_div", READ, "Kbyte", "410.11", grid="(100, 1, 1)"),
    _row(2, "k1_exp_div", WRITE, "byte", "409,088", grid="(100, 1, 1)"),
    "",
])


def test_parse_ncu_csv_sums_per_kernel_and_averages_launches():
    got = parse_ncu_csv(NCU_SAMPLE)
    assert set(got) == {"k0_reduce_mean_sub_mul_etc", "k1_exp_div"}
    r0, w0 = got["k0_reduce_mean_sub_mul_etc"]
    assert r0 == pytest.approx(16.79e6) and w0 == 16_777_216
    r1, w1 = got["k1_exp_div"]
    assert r1 == pytest.approx((409_600 + 410_110) / 2)
    assert w1 == pytest.approx((409_600 + 409_088) / 2)


def test_parse_ncu_csv_units_other_metrics_and_noise():
    text = "\n".join([
        "some line the program printed",
        "==WARNING== a warning before the table",
        HEADER,
        _row(0, "k0_a", READ, "KiB", "1.5"),
        _row(0, "k0_a", WRITE, "Gbyte", "0.5"),
        _row(0, "k0_a", "gpu__time_duration.sum", "usecond", "12.3"),   # not ours: ignored
        _row(1, "k1_b(float const*, float*)", READ, "MiB", "2"),      # a C++ kernel name
        _row(1, "k1_b(float const*, float*)", WRITE, "byte", "n/a"),
    ])
    got = parse_ncu_csv(text)
    assert got["k0_a"] == (1536.0, 5e8)
    assert got["k1_b"][0] == 2 * 1024 ** 2 and math.isnan(got["k1_b"][1])
    assert parse_ncu_csv("==PROF== No kernels were profiled.\n") == {}


def _matmul_norm_graph():
    """A matmul (a cuBLAS call on the GPU: not ours) feeding a LayerNorm and a softmax."""
    b = GraphBuilder("mm_ln")
    x = b.input("x", (32, 64))
    w = b.input("w", (64, 48))
    h = b.matmul(x, w)
    y = b.layer_norm(h, b.constant(np.ones(48, np.float32), "g"),
                     b.constant(np.zeros(48, np.float32), "b"))
    b.output(b.softmax(y), "y")
    return b.build()


@pytest.fixture
def mm_session():
    s = Session(_matmul_norm_graph(), backend="cpu")
    s.auto("rules")
    return s


def test_ncu_command_names_only_generated_kernels():
    # a plan for the GPU, where the matmul is a cuBLAS call (on a CPU it is a kernel)
    from workbench.fusion import run_planner
    from workbench.device import H100
    ours, library = generated_kernels(run_planner("rules", _matmul_norm_graph(),
                                                  device=H100)[0])
    assert ours and len(library) == 1 and "matmul" in library[0]
    cmd = ncu_command("/opt/ncu", "/tmp/x/artifact", "/tmp/x/inputs.npz", ours)
    assert cmd[0] == "/opt/ncu" and "--csv" in cmd
    opt = lambda name: cmd[cmd.index(name) + 1]
    assert opt("--metrics") == "dram__bytes_read.sum,dram__bytes_write.sum"
    assert opt("--clock-control") == "none"
    assert opt("--target-processes") == "all"
    regex = opt("--kernel-name")
    assert regex == "regex:^(" + "|".join(ours) + ")$"
    pattern = re.compile(regex[len("regex:"):])
    assert all(pattern.search(k) for k in ours)
    assert not any(pattern.search(k) for k in library + ["cupy_fill", ours[0] + "_x"])
    assert cmd[-5:] == [sys.executable, "-m", "workbench.measure.counters",
                        "/tmp/x/artifact", "/tmp/x/inputs.npz"]
    # ncu's options, all read-only for the device (clocks left alone, nothing locked or
    # reset); the caches are flushed before each kernel so that reads come from DRAM
    assert {a for a in cmd[:-5] if a.startswith("--")} == {
        "--csv", "--print-units", "--metrics", "--kernel-name-base", "--kernel-name",
        "--clock-control", "--cache-control", "--target-processes"}
    assert opt("--cache-control") == "all"
    with pytest.raises(ValueError):
        kernel_regex(["k0_ok", "k1 bad|.*"])


def test_counters_on_the_cpu_backend_are_nan_with_a_reason(mm_session):
    m0 = mm_session.measure(repeats=1)
    assert m0.dram_source == "not requested" and math.isnan(m0.dram_bytes)
    assert m0.per_kernel[["dram_read", "dram_written"]].isna().all().all()
    m = mm_session.measure(repeats=1, counters=True)
    assert m.dram_source.startswith("unavailable") and "cpu" in m.dram_source
    assert math.isnan(m.dram_bytes)
    assert m.per_kernel[["dram_read", "dram_written"]].isna().all().all()
    assert m.latency_ms == m0.latency_ms and m.within_tolerance     # the same timing
    assert mm_session.measure(counters=True) is m                     # cached
    t = mm_session.table(repeats=1, counters=True)
    assert list(t.columns) == STEP_COLUMNS and t.dram_MB.isna().all()
    assert (t.bytes_moved_MB > 0).all()


def _fake_cuda():
    """A stand-in for the cupy backend: what dram_bytes asks of a backend."""
    return SimpleNamespace(name="cupy", target="cuda", device_name=lambda: "stand-in GPU")


def test_no_ncu_found(mm_session, tmp_path, monkeypatch):
    # measured first: compiling needs the real PATH (the C compiler's assembler and linker)
    measured = mm_session.measure(repeats=1)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(counters, "NCU_LOCATIONS", (str(tmp_path / "nowhere" / "ncu"),))
    assert find_ncu() is None
    m = with_dram(measured, mm_session.plan, mm_session.inputs, _fake_cuda())
    assert m.dram_source.startswith("unavailable: ncu (Nsight Compute) not found")
    assert m.per_kernel.dram_read.isna().all() and math.isnan(m.dram_bytes)


def test_find_ncu_prefers_the_newest_install(tmp_path, monkeypatch):
    for v in ("2024.1.0", "2025.3.0", "2023.3.1"):
        f = tmp_path / "nsight-compute" / v / "ncu"
        f.parent.mkdir(parents=True)
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(counters, "NCU_LOCATIONS", (str(tmp_path / "missing"),
                                                    str(tmp_path / "nsight-compute/*/ncu")))
    assert find_ncu() == str(tmp_path / "nsight-compute" / "2025.3.0" / "ncu")


def _script(path: Path, body: str) -> str:
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# A stand-in ncu: checks its options, runs the profiled child (on the CPU backend:
# the artifact export, the inputs file and the child's loading are real), then prints
# the CSV ncu would, 1000 bytes read and 2000 written per kernel, k-th kernel twice
FAKE_NCU = r'''
import re, subprocess, sys
args = sys.argv[1:]
opt = lambda name: args[args.index(name) + 1]
assert opt("--clock-control") == "none", args
names = re.fullmatch(r"regex:\^\((.*)\)\$", opt("--kernel-name")).group(1).split("|")
child = args[args.index("-m") - 1:]
r = subprocess.run(child + ["--backend", "cpu"], capture_output=True, text=True)
if r.returncode:
    sys.stderr.write(r.stderr)
    sys.exit(r.returncode)
print("==PROF== Connected to process 1 (python)")
print(HEADER)
launch = 0
for i, n in enumerate(names):
    for _ in range(2 if i == len(names) - 1 else 1):
        for metric, value in (("dram__bytes_read.sum", "1,000"),
                              ("dram__bytes_write.sum", "2,000")):
            print(f'"{launch}","1","python","h","{n}","1","7","(1, 1, 1)","(1, 1, 1)",'
                  f'"0","9.0","Command line profiler metrics","{metric}","byte","{value}"')
        launch += 1
'''


def test_pipeline_through_a_stand_in_ncu(mm_session, tmp_path):
    ncu = _script(tmp_path / "ncu", f"HEADER = {HEADER!r}\n" + FAKE_NCU)
    m = with_dram(mm_session.measure(repeats=1), mm_session.plan, mm_session.inputs,
                  _fake_cuda(), ncu=ncu)
    assert m.dram_source == "ncu", m.dram_source
    pk = m.per_kernel.set_index("kernel")
    ours, library = generated_kernels(mm_session.plan)
    assert (pk.loc[ours, "dram_read"] == 1000).all()
    assert (pk.loc[ours, "dram_written"] == 2000).all()
    assert pk.loc[library, ["dram_read", "dram_written"]].isna().all().all()  # cuBLAS
    assert m.dram_bytes == 3000 * len(ours)
    # the counted bytes are untouched
    assert (pk.bytes_read > 0).all() and m.bytes_moved > m.dram_bytes
    assert dram_bytes(mm_session.plan, mm_session.inputs, backend=_fake_cuda(),
                      ncu=ncu) == {k: (1000.0, 2000.0) for k in ours}


def test_ncu_permission_error_is_the_reason(mm_session, tmp_path):
    ncu = _script(tmp_path / "ncu", '''
        import sys
        print("==PROF== Connected to process 7 (/usr/bin/python3.12)")
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
              "NVIDIA GPU Performance Counters on the target device 0. For instructions on "
              "enabling permissions and to get more information see "
              "https://developer.nvidia.com/ERR_NVGPUCTRPERM", file=sys.stderr)
        print("==PROF== Disconnected from process 7")
        sys.exit(1)
    ''')
    m = with_dram(mm_session.measure(repeats=1), mm_session.plan, mm_session.inputs,
                  _fake_cuda(), ncu=ncu)
    assert m.dram_source.startswith("unavailable: ncu: ERR_NVGPUCTRPERM"), m.dram_source
    assert "\n" not in m.dram_source and math.isnan(m.dram_bytes)


def test_failed_child_and_timeout_are_reasons(mm_session, tmp_path):
    broken = _script(tmp_path / "ncu_broken", '''
        import sys
        print("error: LibraryNotLoaded: cannot load the CUDA driver", file=sys.stderr)
        sys.exit(3)
    ''')
    with pytest.raises(CountersUnavailable, match="LibraryNotLoaded"):
        dram_bytes(mm_session.plan, mm_session.inputs, backend=_fake_cuda(), ncu=broken)
    slow = _script(tmp_path / "ncu_slow", "import time; time.sleep(60)\n")
    m = with_dram(mm_session.measure(repeats=1), mm_session.plan, mm_session.inputs,
                  _fake_cuda(), ncu=slow, timeout=1)
    assert m.dram_source == "unavailable: ncu did not finish within 1 s"


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")
def test_measured_dram_bytes_near_counted_on_layernorm():
    s = Session(str(ROOT / "sample_graphs" / "layernorm.json"), backend="cupy")
    s.auto("rules")
    m = s.measure(repeats=3, counters=True)
    if m.dram_source != "ncu":
        pytest.skip(f"DRAM counters not readable here: {m.dram_source}")
    pk = m.per_kernel
    assert len(pk) == 1 and pk[["dram_read", "dram_written"]].notna().all().all()
    info = pk[["kernel", "bytes_read", "dram_read", "bytes_written", "dram_written"]]
    # reads: the row is read from DRAM once (the kernel keeps it in registers); seen on
    # an H100: 16,794,112 read of 16,785,408 counted. Writes: the 50 MB L2 holds the
    # 16.8 MB written and writes it back after the kernel ends, so the counters see
    # only part of it (1.4 MB there) -- never more than was written
    r = pk.iloc[0]
    assert abs(r.dram_read / r.bytes_read - 1) < 0.1, info.to_string()
    assert r.dram_written <= 1.1 * r.bytes_written, info.to_string()
