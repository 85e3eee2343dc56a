"""The local CPU measured by the compiled probe and cached; predictions shown beside
measurements in sessions; calibration from real CPU measurements improves the fit."""
from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pytest

from workbench.errors import WorkbenchError
from workbench.fusion.cost import CostModel, relative_error, samples_from
from workbench.device import Device
from workbench.ir import GraphBuilder
from workbench.measure import KERNEL_COLUMNS
from workbench.runtime import BACKENDS, Backend, backend_names, get_backend, resolve
from workbench.runtime.calibrate import cpu_device, devices_dir
from workbench.session import STEP_COLUMNS, Session


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    from workbench.runtime import calibrate
    calibrate._cached_cpu_device.cache_clear()
    yield tmp_path
    calibrate._cached_cpu_device.cache_clear()


def test_cpu_is_measured_once_and_cached(fresh_cache, monkeypatch):
    from workbench.runtime import calibrate
    monkeypatch.setattr(calibrate, "busy", lambda: False)     # (see the test below)
    dev = cpu_device()
    assert dev.kind == "cpu" and dev.units >= 1
    assert 1e8 < dev.dram_bandwidth < 1e13          # 0.1 GB/s .. 10 TB/s
    assert 0 < dev.launch_overhead < 1e-2
    assert dev.peak_flops > 1e8
    files = list(devices_dir().glob("cpu-*.json"))
    assert len(files) == 1 and files[0].is_relative_to(fresh_cache)
    assert Device(**json.loads(files[0].read_text())) == dev
    # read back from the file, not measured again: edit it and see the edit
    data = json.loads(files[0].read_text())
    data["launch_overhead"] = 0.123
    files[0].write_text(json.dumps(data))
    from workbench.runtime import calibrate
    calibrate._cached_cpu_device.cache_clear()
    assert cpu_device().launch_overhead == 0.123
    again = cpu_device(refresh=True)            # measures anew
    assert again.launch_overhead != 0.123


def test_a_probe_on_a_busy_machine_is_kept_apart_until_a_quiet_one(fresh_cache,
                                                                   monkeypatch):
    """A probe taken while the cores are busy reads the load (launch costs 60x the
    quiet machine's): it is used while the machine stays busy, and the first session
    on a quiet machine measures again and replaces it. (The machine's load is what
    the test sets; the probe itself runs.)"""
    from workbench.runtime import calibrate
    load = {"busy": True}
    monkeypatch.setattr(calibrate, "busy", lambda: load["busy"])
    cpu_device()
    assert [f.name.endswith(".busy.json") for f in devices_dir().glob("cpu-*.json")] == [True]
    busy_file = next(devices_dir().glob("cpu-*.busy.json"))
    data = json.loads(busy_file.read_text())
    busy_file.write_text(json.dumps({**data, "launch_overhead": 0.25e-3}))
    calibrate._cached_cpu_device.cache_clear()
    assert cpu_device().launch_overhead == 0.25e-3         # still busy: the busy probe
    load["busy"] = False
    calibrate._cached_cpu_device.cache_clear()
    quiet = cpu_device()                                   # quiet now: measured again
    assert quiet.launch_overhead != 0.25e-3
    assert [f.name.endswith(".busy.json") for f in devices_dir().glob("cpu-*.json")] == [False]
    load["busy"] = True                                    # and kept when busy again
    calibrate._cached_cpu_device.cache_clear()
    assert cpu_device() == quiet


def test_a_machine_is_busy_as_soon_as_other_work_runs():
    """busy() sees work that has just started, which the minute's load average does not
    yet show: two processes spinning on the cores make it True at once."""
    import subprocess
    import sys
    from workbench.runtime import calibrate
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(max(2, os.cpu_count() or 1))]
    try:
        time.sleep(0.3)
        assert calibrate._others_running() >= 2
        assert calibrate.busy()
    finally:
        for p in spin:
            p.kill()
            p.wait()


def test_backends_have_devices():
    assert get_backend("cpu").device.kind == "cpu"
    assert get_backend("reference").device.kind == "cpu"
    assert get_backend("cpu").device == cpu_device()


def test_one_registry_of_backends():
    """Every backend implements the interface; the CLI and the artifact loader offer
    exactly the registry's names; auto picks a backend that runs here."""
    assert backend_names() == ("auto",) + tuple(BACKENDS)
    for name, cls in BACKENDS.items():
        assert issubclass(cls, Backend) and cls.name == name
        assert cls.target in ("c", "cuda", "")
    assert BACKENDS[resolve("auto")].unavailable() is None
    with pytest.raises(WorkbenchError, match="unknown backend 'tpu'; choose one of auto"):
        get_backend("tpu")
    from workbench.cli import build_parser
    opts = {a.dest: a for a in build_parser()._subparsers._group_actions[0]
            .choices["optimize"]._actions}
    assert tuple(opts["backend"].choices) == backend_names()
    if BACKENDS["cupy"].unavailable():
        with pytest.raises(WorkbenchError, match="needs CuPy and a CUDA GPU"):
            get_backend("cupy")


def test_session_plans_for_its_backends_device():
    s = Session(_graph(), backend="cpu")
    assert s.device is s.backend.device and s.plan.device == s.device
    s.auto("rules")
    assert s.plan.device == s.device and s.cost_model.device == s.device


def _graph():
    b = GraphBuilder("ln_gelu")
    x = b.input("x", (512, 1024))
    g = b.constant(np.ones(1024, np.float32), "gamma")
    be = b.constant(np.zeros(1024, np.float32), "beta")
    b.output(b.gelu(b.layer_norm(x, g, be) * 2.0), "y")
    return b.build()


def test_session_shows_predictions_beside_measurements():
    s = Session(_graph(), backend="cpu")
    assert s.device.kind == "cpu"
    before = s.predict()
    assert len(before.groups) == len(s.plan.groups) and before.ms > 0
    s.auto("stitch")
    after = s.predict()
    assert after.ms < before.ms             # fusion predicted to save time
    t = s.table(repeats=2, warmup=1)
    assert list(t.columns) == STEP_COLUMNS and "predicted_ms" in t.columns
    assert np.all(t.predicted_ms > 0)
    m = s.measure()
    assert "predicted_ms" in KERNEL_COLUMNS
    assert m.per_kernel.predicted_ms.sum() == pytest.approx(m.predicted_ms)
    assert math.isfinite(m.model_error)


def test_calibration_improves_error_on_real_measurements():
    """Fit on measured kernels of two plans (none and rules) of two graphs: the
    calibrated model's squared relative error over those kernels is lower."""
    measured = []
    for g in (_graph(), _softmax()):
        s = Session(g, backend="cpu")
        for planner in ("none", "rules"):
            if planner != "none":
                s.auto(planner)
            m = s.measure(repeats=5, warmup=1)
            measured.append((s.plan, m))
    model = CostModel.for_device(cpu_device())
    samples = [x for plan, m in measured for x in samples_from(model, plan, m.per_kernel)]
    assert len(samples) >= 10
    fitted = model.calibrate(samples)

    def sq_error(mod):
        return sum(relative_error(mod.estimate_features(x.features).seconds, x.seconds) ** 2
                   for x in samples)

    assert sq_error(fitted) < sq_error(model)
    assert fitted.calibrated_on == len(samples)
    # and the session shows the calibrated model's predictions once assigned
    s = Session(_graph(), backend="cpu")
    s.cost_model = fitted
    assert s.predict().ms == pytest.approx(fitted.plan_seconds(s.plan) * 1e3)


def _softmax():
    b = GraphBuilder("softmax")
    x = b.input("x", (1024, 2048))
    b.output(b.softmax(x, axis=-1), "y")
    return b.build()


def test_probe_times_every_expensive_op(fresh_cache):
    """Each expensive elementwise op the probe can write without attributes has a rate
    (exp, log, erf, tanh...: their nominal flop counts say nothing of what this CPU's
    compiler makes of them), positive and read back from the cache as it was."""
    from workbench.ops import all_ops
    dev = cpu_device()
    rates = dict(dev.op_rates)
    for name in ("exp", "log", "erf", "tanh", "sqrt", "pow"):
        assert all_ops()[name].expensive and rates.get(name, 0) > 0, name
    assert not any(all_ops()[n].expensive is False for n in rates)
    assert dev.op_rate("add") == 0.0 and dev.op_rate("exp") == rates["exp"]
    hash(dev)     # (plans key caches by device)
    from workbench.runtime import calibrate
    calibrate._cached_cpu_device.cache_clear()
    assert cpu_device() == dev


def test_op_rates_follow_the_kernel_helpers(fresh_cache, monkeypatch):
    """The op rates are timed with the C helpers kernels use (wb_expf...): a cached
    probe keeps its bandwidth and call cost, but when the helpers change (a new
    workbench) its ops are timed again with the new ones, and kept under the new key."""
    from workbench.runtime import calibrate
    monkeypatch.setattr(calibrate, "busy", lambda: False)
    dev = cpu_device()
    (ops,) = devices_dir().glob("ops-*.json")
    # the cached rates are read back, not timed again: edit them and see the edit
    ops.write_text(json.dumps([["exp", 1.5e9]]))
    calibrate._cached_cpu_device.cache_clear()
    assert cpu_device().op_rates == (("exp", 1.5e9),)
    # another prelude (another workbench's helpers): timed again, the rest kept
    real = calibrate._op_probe_source
    monkeypatch.setattr(calibrate, "_op_probe_source",
                        lambda: (real()[0] + "/* new helpers */\n", real()[1]))
    calibrate._cached_cpu_device.cache_clear()
    again = cpu_device()
    assert dict(again.op_rates).keys() == dict(dev.op_rates).keys()
    assert again.op_rates != (("exp", 1.5e9),)
    assert again.dram_bandwidth == dev.dram_bandwidth
    assert len(list(devices_dir().glob("ops-*.json"))) == 2
