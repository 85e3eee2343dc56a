"""The kernel cache proves what it holds (runtime/cache.py): a binary someone else put
under a kernel's name is never loaded, a world-writable cache is refused, killed
builds' leftovers are cleaned."""
import os
import time

import numpy as np
import pytest

import workbench as wb
from workbench.codegen import lower_group, render_kernel
from workbench.device import H100
from workbench.errors import WorkbenchError
from workbench.fusion import Plan
from workbench.runtime import Program, cache, cc, get_backend
from workbench.runtime.cpu import compile_kernel


def _kernel(cols: int):
    b = wb.GraphBuilder("planted")
    x = b.input("x", (3, cols))
    b.output(b.exp(x) + 1.0, "y")
    p = Plan.singletons(b.build(), H100)
    k = lower_group(p.graph, p.groups[0], H100)
    return p, k, render_kernel(k, "c")


def _evil_library(tmp_path, symbol: str, marker) -> bytes:
    """A library exporting the kernel's symbol whose constructor leaves a marker."""
    src = tmp_path / "evil.c"
    src.write_text("#include <stdio.h>\n"
                   "__attribute__((constructor)) static void wb_evil(void) {\n"
                   f"  FILE* f = fopen(\"{marker}\", \"w\"); if (f) fclose(f);\n}}\n"
                   f"void {symbol}(void) {{}}\n")
    out = tmp_path / "evil.so"
    compiler, _ = cc.find_compiler()
    assert os.system(f"{compiler} -shared -fPIC {src} -o {out}") == 0
    return out.read_bytes()


def _check(p, x):
    out = Program(p, get_backend("cpu")).run({"x": x})["y"]
    np.testing.assert_allclose(out, np.exp(x) + 1.0, rtol=1e-5)


@pytest.mark.parametrize("seal", ["none", "copied", "forged"])
def test_a_planted_library_is_built_again_not_loaded(tmp_path, monkeypatch, seal):
    """A shared team cache: another user's file under a kernel's name (no seal, the
    real library's seal, a seal made with another key) is replaced by this user's
    build; its constructor never runs."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    cols = 17 + ["none", "copied", "forged"].index(seal)   # a source not loaded yet
    p, k, src = _kernel(cols)
    path = cc.build_library(k.name, src)
    marker = tmp_path / "ran"
    sealed = path.with_name(path.name + cache.SEAL_SUFFIX)
    good_seal = sealed.read_text()
    path.write_bytes(_evil_library(tmp_path, k.name, marker))
    if seal == "none":
        sealed.unlink()
    elif seal == "copied":
        sealed.write_text(good_seal)
    else:
        import hashlib
        import hmac
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        sealed.write_text(hmac.new(b"someone else's key".ljust(32), f"{path.name}\0{digest}"
                                   .encode(), hashlib.sha256).hexdigest())
    assert cache.read_sealed(path) is None
    x = np.random.default_rng(0).uniform(-1, 1, (3, cols)).astype(np.float32)
    _check(p, x)
    assert not marker.exists()
    assert cache.read_sealed(path) is not None        # this user's build, sealed again


def test_a_library_swapped_after_its_check_is_not_loaded(tmp_path, monkeypatch):
    """Between the build's check and the load, the file is swapped: the load checks the
    bytes it maps, refuses them, and the backend builds the kernel again."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    p, k, src = _kernel(23)
    path = cc.build_library(k.name, src)
    marker = tmp_path / "ran"
    path.write_bytes(_evil_library(tmp_path, k.name, marker))
    with pytest.raises(cache.CacheEntryChanged, match="seal does not verify"):
        cc.load_library(path)
    assert not marker.exists()
    ck = compile_kernel(k, src)            # (built again, then loaded: once)
    assert ck.path == path and cache.read_sealed(path) is not None
    assert not marker.exists()


def test_a_signed_artifact_loads_only_its_own_builds(tmp_path, monkeypatch):
    """The red team's case: an artifact whose signature verifies, and a library planted
    in the cache under the name its kernel builds to. The kernel is built from the
    verified source; the planted library never loads."""
    from workbench.artifact import HmacKey
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    b = wb.GraphBuilder("signed")
    x = b.input("x", (4, 29))
    b.output(b.tanh(x) * 2.0, "y")
    s = wb.Session(b.build(), backend="cpu")
    s.auto("rules")
    key = HmacKey.generate()
    art = s.export(tmp_path / "a", sign_with=key)
    (k,) = s.kernels()
    (shipped,) = (art / "kernels").glob("*.c")      # what the loader will build
    path = cc.build_library(k.name, shipped.read_text())
    marker = tmp_path / "ran"
    evil = _evil_library(tmp_path, k.name, marker)
    path.write_bytes(evil)
    model = wb.load_artifact(art, backend="cpu", trusted_keys=[key])
    xs = np.random.default_rng(1).uniform(-2, 2, (4, 29)).astype(np.float32)
    np.testing.assert_allclose(model(x=xs)["y"], np.tanh(xs) * 2.0, rtol=1e-5)
    assert not marker.exists()
    assert path.read_bytes() != evil and cache.read_sealed(path) is not None   # rebuilt


def test_a_world_writable_cache_is_refused_with_the_reason(tmp_path, monkeypatch):
    root = tmp_path / "shared"
    (root / "cpu").mkdir(parents=True)
    os.chmod(root / "cpu", 0o777)
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    with pytest.raises(WorkbenchError, match="writable by every user .*chmod o-w") as e:
        cc.build_library("k0_x", "void k0_x(void) {}\n")
    assert "\n" not in str(e.value)
    with pytest.raises(WorkbenchError, match="writable by every user"):
        wb.Session(_kernel(5)[0].graph, backend="cpu").run(
            {"x": np.ones((3, 5), np.float32)})
    os.chmod(root / "cpu", 0o755)           # a group's shared cache: allowed, sealed
    cc.build_library("k0_x", "void k0_x(void) {}\n")


def test_a_killed_builds_leftovers_are_removed_once_stale(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    (root / "cpu").mkdir(parents=True)
    stale, fresh = root / "cpu" / "tmpdead", root / "cpu" / "tmplive"
    for d in (stale, fresh):
        d.mkdir()
        (d / "k.c").write_text("int x;\n")
    old = time.time() - 2 * cache.STALE_SECONDS
    os.utime(stale, (old, old))
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    cache._cleaned.discard(root / "cpu")
    cc.cache_dir()
    assert not stale.exists() and fresh.exists()


def test_a_cached_cubin_is_reused_only_under_its_seal(tmp_path, monkeypatch):
    from workbench.runtime import nvrtc
    try:
        nvrtc.toolchain()
    except Exception as e:      # noqa: BLE001 -- no NVRTC here
        pytest.skip(f"NVRTC unavailable: {e}")
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    src = 'extern "C" __global__ void k0_t(float* p) { p[threadIdx.x] = 1.0f; }\n'
    good = nvrtc.compile_cuda(src, "k0_t", "90")
    (cubin,) = (tmp_path / "cache" / "cuda").glob("k0_t-*.cubin")
    assert nvrtc.compile_cuda(src, "k0_t", "90") == good
    cubin.write_bytes(b"\x7fELF planted" + good[12:])
    assert nvrtc.compile_cuda(src, "k0_t", "90") == good      # compiled again
    assert cubin.read_bytes() == good


def test_the_seal_key_is_private(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(cache, "_key", None)
    key = cache.seal_key()
    path = tmp_path / "config" / "fusion-workbench" / "cache.key"
    assert len(key) == 32 and path.stat().st_mode & 0o777 == 0o600
    monkeypatch.setattr(cache, "_key", None)
    assert cache.seal_key() == key                      # made once, then read
    os.chmod(path, 0o644)
    monkeypatch.setattr(cache, "_key", None)
    with pytest.raises(WorkbenchError, match="not this user's private"):
        cache.seal_key()
