#!/usr/bin/env python
"""The GPU benchmark: the workbench's planners against torch eager and torch.compile on
the same inputs, beside the device's measured copy bandwidth, in one run.

    python benchmarks/gpu.py                                   # everything, 30 repeats
    python benchmarks/gpu.py --quick --backend cpu             # tiny sizes, on the CPU
    python benchmarks/gpu.py --workloads softmax bert_layer --planners none rules stitch

In one run, on one device (``--backend cupy``: the GPU, CUDA events; ``--backend cpu``:
the C backend and torch on the CPU, wall clock -- the same logic at tiny sizes, so the
script is testable without a GPU):

1. the copy bandwidth: a device-to-device copy of a large buffer (2 GiB when memory
   allows), counted as bytes read + bytes written per second, median of the repeats --
   the physical limit of a memory-bound kernel;
2. every workload (``--workloads``; fp32 row workloads built with the GraphBuilder,
   bf16 row workloads, and transformers' BERT layer, GPT-2 block and LLaMA decoder
   layer imported with ``workbench.from_torch``) under the workbench planners
   (``--planners``: none, xla, rules, stitch and ``tuned`` = stitch then
   ``Session.tune()`` where the Session has it), and torch eager and ``torch.compile``
   (default mode) of the same computation on the same input arrays.

Per row: median latency, GB/s (bytes: the workbench's counted ``bytes_moved``; for the
torch rows the workload's compulsory bytes -- inputs and parameters read once, outputs
written once), % of the copy bandwidth of the same run, kernels, counted bytes, bytes
measured by the hardware when the workbench reports them (a ``dram_bytes`` column of
the per-kernel frame), speedup over torch.compile, and whether the output matched the
NumPy reference. Every failure is caught per workload and method and recorded with its
reason; results are written after every workload, so a run cut short leaves data.

Writes ``<out>/gpu-<device>-<date>.json`` and ``<out>/gpu-<device>.md`` (``<out>``
defaults to benchmarks/results) and prints the tables, a compact summary and PASS/MISS
lines for the targets last. Timing never changes the exit status (0): it is a
benchmark; only an unusable backend or bad arguments exit 2.
"""
from __future__ import annotations

import argparse
import copy
import datetime as _dt
import gc
import json
import math
import os
import re
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from harness import RESULTS, attention_variants, log, machine_info, stats, time_fn
import make_samples as samples

import workbench as wb
from workbench.fusion.key_limit import causal_mask
from workbench.dtypes import DType
from workbench.ir import GraphBuilder
from workbench.session import Session
from workbench.tolerance import max_rel_error, tolerance

PLANNERS = ("none", "xla", "rules", "stitch", "tuned")
TORCH_METHODS = (("torch_eager", "torch eager"), ("torch_compile", "torch.compile"))
GIB = 1 << 30

# targets (printed as PASS / MISS; they never change the exit status)
TARGET_COPY_BIG = 0.95        # stitch/tuned on each 32768x4096 row workload
TARGET_COPY_OTHER = 0.85      # stitch/tuned on the other row workloads
TARGET_VS_COMPILE = 1.0       # every row workload
TARGET_VS_COMPILE_GEOMEAN = 1.2
TARGET_MODEL_VS_XLA = 1.3     # stitch on the BERT layer and the GPT-2 block
TARGET_MODEL_VS_RULES = 1.0


def short_error(e: BaseException, limit: int = 300) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:limit]


def tail_traceback(limit: int = 12) -> str:
    return "".join(traceback.format_exc().splitlines(True)[-limit:])


# -- the device ----------------------------------------------------------------------------
class Device:
    """Where this run measures: the GPU through CuPy (CUDA events), or the CPU."""

    def __init__(self, backend: str, host_cpu: str = "cpu"):
        self.backend, self.host_cpu = backend, host_cpu
        self.gpu = backend == "cupy"
        self.cp = None
        if self.gpu:
            import cupy
            self.cp = cupy
            cupy.cuda.Device(0).use()

    @property
    def name(self) -> str:
        if not self.gpu:
            return f"CPU: {self.host_cpu}"
        props = self.cp.cuda.runtime.getDeviceProperties(self.cp.cuda.Device().id)
        n = props["name"]
        return n.decode() if isinstance(n, bytes) else str(n)

    @property
    def slug(self) -> str:
        if not self.gpu:
            return "cpu"
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-") or "gpu"

    def info(self) -> dict:
        if not self.gpu:
            return {"device": self.name, "backend": "cpu"}
        cp = self.cp
        out: dict = {"device": self.name, "backend": "cupy", "cupy": cp.__version__}
        try:
            props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
            # (CUDA 13 dropped some fields, e.g. clockRate: each one is optional)
            for key, prop, scale in (("sms", "multiProcessorCount", 1),
                                     ("memory_GiB", "totalGlobalMem", GIB),
                                     ("l2_MB", "l2CacheSize", 1e6),
                                     ("memory_bus_bits", "memoryBusWidth", 1),
                                     ("memory_clock_MHz", "memoryClockRate", 1e3),
                                     ("sm_clock_MHz", "clockRate", 1e3)):
                if props.get(prop) is not None:
                    x = int(props[prop]) / scale
                    out[key] = int(x) if scale == 1 else round(x, 1)
            if "major" in props:
                out["compute_capability"] = f"{props['major']}.{props.get('minor', 0)}"
        except Exception as e:      # an older or newer CuPy spelling: record, go on
            out["properties_error"] = short_error(e)
        for key, fn in (("cuda_driver", cp.cuda.runtime.driverGetVersion),
                        ("cuda_runtime", cp.cuda.runtime.runtimeGetVersion)):
            try:
                v = int(fn())
                out[key] = f"{v // 1000}.{v % 1000 // 10}"
            except Exception as e:
                out[key] = f"unknown ({short_error(e)})"
        try:
            out["nvrtc"] = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
        except Exception:
            pass
        try:   # driver version, clocks, power at the start (informational)
            r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,"
                                "clocks.mem,clocks.max.sm,temperature.gpu,power.draw",
                                "--format=csv,noheader"], capture_output=True, text=True,
                               timeout=20)
            if r.returncode == 0:
                out["nvidia_smi"] = r.stdout.strip().splitlines()[0]
        except Exception:
            pass
        return out

    def free_bytes(self) -> int:
        if self.gpu:
            free, _ = self.cp.cuda.runtime.memGetInfo()
            return int(free)
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError):
            return 4 * GIB

    def cleanup(self, torch_mod=None) -> None:
        """Give memory back between workloads: Python garbage, CuPy's pools, torch's
        cache, torch.compile's caches."""
        gc.collect()
        if self.gpu:
            try:
                self.cp.get_default_memory_pool().free_all_blocks()
                self.cp.get_default_pinned_memory_pool().free_all_blocks()
            except Exception as e:
                log(f"warning: freeing CuPy's pools failed: {short_error(e)}")
        if torch_mod is not None:
            try:
                torch_mod._dynamo.reset()
            except Exception:
                pass
            if self.gpu and torch_mod.cuda.is_available():
                torch_mod.cuda.empty_cache()


def copy_bandwidth(dev: Device, quick: bool, warmup: int, repeats: int, T: "Torch") -> dict:
    """Device-to-device copy of a large float32 buffer: (bytes read + bytes written) /
    median time. CuPy with CUDA events on the GPU (and torch's copy_ as a cross-check);
    NumPy and the wall clock on the CPU."""
    want = (256 << 20 if quick else 2 * GIB) if dev.gpu else (64 << 20 if quick else 512 << 20)
    size = max(16 << 20, min(want, dev.free_bytes() // 4))
    n = size // 4
    out: dict = {"buffer_bytes": n * 4, "counted": "bytes read + bytes written per copy"}
    if dev.gpu:
        cp = dev.cp
        src = cp.random.random(n, dtype=cp.float32)
        dst = cp.empty_like(src)
        for _ in range(max(1, warmup)):
            cp.copyto(dst, src)
        cp.cuda.Device().synchronize()
        ts = []
        for _ in range(repeats):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            cp.copyto(dst, src)
            e1.record()
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) / 1e3)
        if not bool(cp.array_equal(dst[:1 << 20], src[:1 << 20])):
            out["warning"] = "the copy's destination differs from its source"
        del src, dst
        dev.cleanup()
        out["method"] = "cupy.copyto, CUDA events"
    else:
        src = np.random.default_rng(0).random(n, dtype=np.float32)
        dst = np.empty_like(src)
        ts = time_fn(lambda: np.copyto(dst, src), warmup, repeats)
        del src, dst
        out["method"] = "numpy.copyto, wall clock"
    st = stats(ts)
    out.update(st)
    out["GBps"] = 2 * n * 4 / (st["latency_ms"] / 1e3) / 1e9
    if dev.gpu and T.ok:
        try:   # a cross-check through torch's allocator and copy kernel
            torch = T.torch
            a = torch.rand(n, device="cuda")
            b = torch.empty_like(a)
            tt = T.time(lambda: b.copy_(a), warmup, repeats)
            out["torch_copy_GBps"] = 2 * n * 4 / (stats(tt)["latency_ms"] / 1e3) / 1e9
            del a, b
            torch.cuda.empty_cache()
        except Exception as e:
            out["torch_copy_GBps"] = f"failed: {short_error(e)}"
    return out


# -- torch ---------------------------------------------------------------------------------
class Torch:
    """torch on the run's device, or why it cannot run (then every torch row is n/a)."""

    def __init__(self, dev: Device, tf32: bool = False):
        self.torch, self.why = None, None
        self.device = "cuda" if dev.gpu else "cpu"
        try:
            import torch
        except Exception as e:
            self.why = f"torch not importable: {short_error(e)}"
            return
        if dev.gpu and not torch.cuda.is_available():
            self.why = f"torch {torch.__version__} sees no CUDA device"
            return
        self.torch = torch
        try:  # fp32 matmuls as the workbench computes them: exact (torch's default too),
            # or TF32 on both sides (--matmul-precision tf32)
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
        except Exception:
            pass

    @property
    def ok(self) -> bool:
        return self.torch is not None

    def version(self) -> dict:
        if not self.ok:
            return {"torch": self.why}
        t = self.torch
        out = {"torch": t.__version__, "torch_cuda": getattr(t.version, "cuda", None)}
        try:
            import transformers
            out["transformers"] = transformers.__version__
        except Exception as e:
            out["transformers"] = f"not importable: {short_error(e)}"
        try:
            import triton
            out["triton"] = triton.__version__
        except Exception:
            out["triton"] = None
        return out

    def tensor(self, arr: np.ndarray, dtype: str | None = None):
        """A host array on the device, optionally cast ('bfloat16')."""
        t = self.torch
        a = np.asarray(arr)
        if a.dtype.name == "bfloat16":        # ml_dtypes' bfloat16: same bits as torch's
            x = t.from_numpy(np.ascontiguousarray(a).view(np.uint16)).view(t.bfloat16)
        else:
            x = t.from_numpy(np.ascontiguousarray(a))
        x = x.to(self.device)
        if dtype is not None:
            x = x.to(getattr(t, dtype))
        return x.contiguous()

    def to_numpy(self, x) -> np.ndarray:
        if x.dtype == self.torch.bfloat16:
            x = x.float()
        return x.detach().cpu().numpy()

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def time(self, fn, warmup: int, repeats: int) -> list[float]:
        """Seconds of each of `repeats` calls after `warmup` calls: CUDA events on the
        GPU (device time of the call), the wall clock on the CPU."""
        t = self.torch
        with t.no_grad():
            if self.device != "cuda":
                return time_fn(fn, warmup, repeats)
            for _ in range(max(1, warmup)):
                fn()
            t.cuda.synchronize()
            out = []
            for _ in range(repeats):
                e0 = t.cuda.Event(enable_timing=True)
                e1 = t.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                e1.synchronize()
                out.append(e0.elapsed_time(e1) / 1e3)
            return out


def leaves(out) -> list:
    """The tensors of a (nested) output, in order."""
    from torch.utils import _pytree as pytree
    return [x for x in pytree.tree_leaves(out) if hasattr(x, "dtype")]


# -- workloads -------------------------------------------------------------------------------
@dataclass
class Case:
    """One workload built at one size.

    ``graph`` is what the workbench runs (None with ``unsupported`` saying why).
    ``torch_fn(T)`` returns a function of the torch tensors ``torch_args(T, inputs)``
    gives, computing the same outputs (in the graph's output order); ``inputs`` are
    the graph inputs by name (the Session's), or ``fallback_inputs()`` when there is no
    graph."""
    description: str
    graph: object = None
    unsupported: str | None = None
    torch_fn: Callable | None = None
    torch_args: Callable | None = None
    fallback_inputs: Callable | None = None
    torch_dtype: str | None = None          # cast the torch inputs (bf16 rows)


@dataclass
class Workload:
    name: str
    group: str                  # "row" (memory-bound row kernels), "gemm" or "model"
    build: Callable[[bool], Case]
    big: bool = False           # a 32768x4096 row workload (the 95% target)
    dtype: str = "float32"
    tags: tuple = field(default_factory=tuple)


def _row_torch_args(graph, dtype=None):
    """Graph inputs in order, then the graph's array constants by name (torch side)."""
    names = [k for k, v in graph.constants.items() if np.ndim(v) > 0]

    def args(T, inputs):
        return ([T.tensor(inputs[k], dtype) for k in graph.inputs]
                + [T.tensor(graph.constants[k], dtype) for k in names])
    return args


def _graph_case(graph, fn, dtype=None) -> Case:
    return Case(graph.description or graph.name, graph=graph,
                torch_fn=lambda T: fn(T.torch), torch_args=_row_torch_args(graph, dtype),
                torch_dtype=dtype)


def softmax_case(rows, cols):
    g = samples.softmax(rows, cols)
    return _graph_case(g, lambda torch: lambda x: torch.softmax(x, -1))


def layernorm_case(rows, cols):
    g = samples.layernorm(rows, cols)
    return _graph_case(g, lambda torch: lambda x, gamma, beta: torch.nn.functional.layer_norm(
        x, (x.shape[-1],), gamma, beta, 1e-5))


def _torch_rms_norm(torch):
    F = torch.nn.functional
    if hasattr(F, "rms_norm"):
        return lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)
    return lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def rmsnorm_case(rows, cols):
    return _graph_case(samples.rmsnorm(rows, cols), _torch_rms_norm)


def bias_gelu_ln_case(rows, cols):
    g = samples.bias_gelu_residual_layernorm(rows, cols)

    def fn(torch):
        F = torch.nn.functional
        return lambda x, res, bias, gamma, beta: F.layer_norm(
            F.gelu(x + bias) + res, (x.shape[-1],), gamma, beta, 1e-5)
    return _graph_case(g, fn)


def attention_softmax_case(batch, heads, seq):
    g = samples.attention_softmax(batch, heads, seq, head_dim=64)   # scale 1/sqrt(64) = 1/8
    return _graph_case(g, lambda torch: lambda s, mask: torch.softmax(s * 0.125 + mask, -1))


def cross_entropy_case(rows, classes):
    b = GraphBuilder("cross_entropy_lse",
                     f"Cross-entropy's per-row log-sum-exp of logits[{rows}, {classes}] "
                     f"-> [{rows}, 1] (max + log(sum(exp(x - max))))")
    x = b.input("logits", (rows, classes))
    b.output(b.reduce_log_sum_exp(x, axes=[-1], keepdims=True, source="lse"), "lse")
    return _graph_case(b.build(), lambda torch: lambda x: torch.logsumexp(x, -1, keepdim=True))


def bf16_row_case(kind: str, rows: int, cols: int) -> Case:
    """A row workload in bfloat16: the fp32 sample's constants cast to bf16. When the
    workbench cannot build it, the case carries the reason and torch still runs on
    fresh random inputs."""
    g32 = {"softmax": samples.softmax, "layernorm": samples.layernorm,
           "rmsnorm": samples.rmsnorm}[kind](rows, cols)
    torch_fns = {"softmax": lambda torch: lambda x: torch.softmax(x, -1),
                 "layernorm": lambda torch: lambda x, gamma, beta:
                 torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta, 1e-5),
                 "rmsnorm": _torch_rms_norm}
    desc = f"{g32.description} (bfloat16)"
    graph, why = None, None
    if not hasattr(DType, "bfloat16"):
        why = "unsupported by the workbench: workbench.ir.DType has no bfloat16"
    else:
        try:
            b = GraphBuilder(f"{kind}_bf16", desc)
            x = b.input("x", (rows, cols), "bfloat16")
            c = {k: b.constant(v, k, dtype="bfloat16") for k, v in g32.constants.items()}
            if kind == "softmax":
                y = b.softmax(x, axis=-1, source="softmax")
            elif kind == "layernorm":
                y = b.layer_norm(x, c["gamma"], c["beta"], eps=1e-5, source="ln")
            else:
                y = b.rms_norm(x, c["weight"], eps=1e-6, source="rmsnorm")
            b.output(y, "y")
            graph = b.build()
        except Exception as e:
            why = f"unsupported by the workbench: {short_error(e)}"
    if graph is not None:
        return _graph_case(graph, torch_fns[kind], None)
    consts = [k for k, v in g32.constants.items() if np.ndim(v) > 0]

    def fallback():
        rng = np.random.default_rng(0)
        return {k: rng.uniform(-1.0, 1.0, g32.value(k).shape).astype(np.float32)
                for k in g32.inputs}

    def args(T, inputs):
        return ([T.tensor(inputs[k], "bfloat16") for k in g32.inputs]
                + [T.tensor(g32.constants[k], "bfloat16") for k in consts])
    return Case(desc, unsupported=why, torch_fn=lambda T: torch_fns[kind](T.torch),
                torch_args=args, fallback_inputs=fallback, torch_dtype="bfloat16")


def attention_scores_case(batch, heads, seq, head_dim):
    """BERT's attention scores: q @ kᵀ (K transposed in place), scaled, plus the
    padding mask -- a GEMM of depth 64 whose epilogue the GPU's block GEMM fuses
    under stitch (rules: cuBLAS, then an elementwise kernel)."""
    b = GraphBuilder("attention_scores",
                     f"Attention scores q[{batch},{heads},{seq},{head_dim}] @ kᵀ "
                     f"/ sqrt({head_dim}) + mask[{batch},1,1,{seq}]")
    q = b.input("q", (batch, heads, seq, head_dim))
    k = b.input("k", (batch, heads, seq, head_dim))
    z = b.matmul(q, b.op("transpose", k, perm=[0, 1, 3, 2])) * (1.0 / math.sqrt(head_dim))
    b.output(z + b.input("mask", (batch, 1, 1, seq), range=(-1.0, 0.0)), "s")
    scale = 1.0 / math.sqrt(head_dim)
    return _graph_case(b.build(), lambda torch: lambda q, k, m: (
        torch.matmul(q, k.transpose(-1, -2)) * scale + m))


def attention_case(batch, heads, seq, head_dim, dtype="float32", causal=False):
    """BERT's whole attention: softmax(q kᵀ / sqrt(d) + mask) v, the heads merged back
    -- one FlashAttention-style kernel under stitch on a GPU (rules: cuBLAS, softmax
    kernel, cuBLAS, copies); torch runs the same ops (its eager attention). In
    bfloat16 both products run on tensor cores (exact in TF32) whatever the precision
    option. ``causal``: GPT-2's, the mask a constant of 0 and the dtype's lowest as
    torch.onnx.export writes it, which stitch's kernel reads to skip each tile's blocks
    of keys past the diagonal (fusion/key_limit.py)."""
    half = "" if dtype == "float32" else f" ({dtype})"
    what = f"a constant causal mask [{seq},{seq}]" if causal else f"mask[{batch},1,1,{seq}]"
    b = GraphBuilder(("causal_" if causal else "") + "attention"
                     + half.replace(" (", "_").rstrip(")"),
                     f"Attention over q, k, v[{batch},{heads},{seq},{head_dim}], "
                     f"{what}, heads merged{half}")
    q, k, v = (b.input(x, (batch, heads, seq, head_dim), dtype) for x in "qkv")
    scale = 1.0 / math.sqrt(head_dim)
    z = b.matmul(q, b.op("transpose", k, perm=[0, 1, 3, 2])) * scale
    if causal:
        z = z + b.constant(causal_mask(seq, seq, dtype)[0, 0], "mask")
    else:
        z = z + b.input("mask", (batch, 1, 1, seq), dtype, range=(-1.0, 0.0))
    o = b.matmul(b.softmax(z, axis=-1), v)
    b.output(b.op("reshape", b.op("transpose", o, perm=[0, 2, 1, 3]),
                  shape=[batch, seq, heads * head_dim]), "o")

    def fn(torch):
        def attention(q, k, v, m):
            o = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * scale + m, -1) @ v
            return o.transpose(1, 2).reshape(batch, seq, heads * head_dim)
        return attention
    return _graph_case(b.build(), fn)


def ffn_gelu_case(rows, hidden, inter, dtype="float32"):
    """BERT's FFN up-projection: x @ W + bias, GELU (a GEMM of depth 768: the cost
    model keeps cuBLAS for it; the tuned and forced rows say whether it should)."""
    rng = np.random.default_rng(0)
    half = "" if dtype == "float32" else f" ({dtype})"
    b = GraphBuilder("ffn_gelu" + half.replace(" (", "_").rstrip(")"),
                     f"FFN up: gelu(x[{rows},{hidden}] @ W[{hidden},{inter}] + bias){half}")
    x = b.input("x", (rows, hidden), dtype)
    w = b.constant((rng.standard_normal((hidden, inter)) / math.sqrt(hidden))
                   .astype(np.float32), "w", dtype=dtype)
    h = b.matmul(x, w) + b.constant(rng.standard_normal(inter).astype(np.float32), "bias",
                                    dtype=dtype)
    b.output(b.gelu(h), "y")
    return _graph_case(b.build(), lambda torch: lambda x, w, bias: (
        torch.nn.functional.gelu(x @ w + bias)))


# transformers layers: sizes (batch, seq, hidden, heads, intermediate)
def _causal_mask(torch, batch, seq):
    """An additive causal mask [batch, 1, seq, seq], as transformers builds it."""
    m = torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1)
    return m[None, None].expand(batch, 1, seq, seq).contiguous()


def _module_case(name: str, make: Callable) -> Case:
    """Import (module, example args) built on the CPU with ``workbench.from_torch``; the
    torch rows run a copy of the module on the run's device with the tensors replaced,
    in order, by the Session's inputs (the graph inputs are the args' tensor leaves)."""
    import torch
    from torch.utils import _pytree as pytree
    torch.manual_seed(0)
    module, args, desc = make(torch)
    module = module.eval()
    graph = wb.from_torch(module, args, name=name)
    flat, spec = pytree.tree_flatten(args)
    slots = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]
    if len(slots) != len(graph.inputs):
        raise RuntimeError(f"{len(slots)} tensor arguments but the imported graph has "
                           f"{len(graph.inputs)} inputs {graph.inputs}")

    def torch_fn(T):
        dev_module = copy.deepcopy(module).to(T.device).eval()

        def call(*tensors):
            xs = list(flat)
            for i, t in zip(slots, tensors):
                xs[i] = t
            return dev_module(*pytree.tree_unflatten(xs, spec))
        return call

    def torch_args(T, inputs):
        return [T.tensor(inputs[k]) for k in graph.inputs]
    return Case(desc, graph=graph, torch_fn=torch_fn, torch_args=torch_args)


def bert_case(quick: bool) -> Case:
    batch, seq, hidden, heads, inter = (1, 64, 128, 4, 512) if quick else (8, 512, 768, 12, 3072)

    def make(torch):
        from transformers import BertConfig
        from transformers.models.bert.modeling_bert import BertLayer
        cfg = BertConfig(hidden_size=hidden, num_attention_heads=heads,
                         intermediate_size=inter, attn_implementation="eager")
        x = torch.randn(batch, seq, hidden)
        mask = torch.zeros(batch, 1, 1, seq)
        mask[-1, ..., seq * 3 // 4:] = torch.finfo(torch.float32).min   # padding
        return (BertLayer(cfg), (x, mask),
                f"transformers BertLayer, batch {batch} x seq {seq} x hidden {hidden}, "
                f"{heads} heads, intermediate {inter}, eager attention, random weights")
    return _module_case("bert_layer", make)


def gpt2_case(quick: bool) -> Case:
    batch, seq, hidden, heads = (1, 64, 128, 4) if quick else (8, 512, 768, 12)

    def make(torch):
        from transformers import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2Block
        cfg = GPT2Config(n_embd=hidden, n_head=heads, n_positions=max(1024, seq),
                         attn_implementation="eager")
        x = torch.randn(batch, seq, hidden)
        # forward(hidden_states, past_key_values, attention_mask)
        return (GPT2Block(cfg), (x, None, _causal_mask(torch, batch, seq)),
                f"transformers GPT2Block, batch {batch} x seq {seq} x hidden {hidden}, "
                f"{heads} heads, causal mask, eager attention, random weights")
    return _module_case("gpt2_block", make)


def llama_case(quick: bool) -> Case:
    batch, seq, hidden, heads, inter = (1, 64, 128, 4, 256) if quick else (4, 512, 1024, 16, 2816)

    def make(torch):
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import (
            LlamaDecoderLayer,
            LlamaRotaryEmbedding,
        )
        cfg = LlamaConfig(hidden_size=hidden, num_attention_heads=heads,
                          num_key_value_heads=heads, intermediate_size=inter,
                          max_position_embeddings=max(2048, seq),
                          attn_implementation="eager")
        x = torch.randn(batch, seq, hidden)
        cos, sin = LlamaRotaryEmbedding(cfg)(x, torch.arange(seq)[None].expand(batch, seq))
        # forward(hidden_states, attention_mask, position_ids, past_key_values, use_cache,
        #         position_embeddings)
        args = (x, _causal_mask(torch, batch, seq), None, None, False, (cos, sin))
        return (LlamaDecoderLayer(cfg, layer_idx=0), args,
                f"transformers LlamaDecoderLayer, batch {batch} x seq {seq} x hidden "
                f"{hidden}, {heads} heads, intermediate {inter}, rotary tables as inputs, "
                f"causal mask, eager attention, random weights")
    return _module_case("llama_layer", make)


def _rc(quick, full, small):
    return small if quick else full


WORKLOADS = [
    Workload("softmax", "row", lambda q: softmax_case(*_rc(q, (32768, 4096), (256, 512))),
             big=True),
    Workload("layernorm", "row", lambda q: layernorm_case(*_rc(q, (32768, 4096), (256, 512))),
             big=True),
    Workload("rmsnorm", "row", lambda q: rmsnorm_case(*_rc(q, (32768, 4096), (256, 512))),
             big=True),
    Workload("bias_gelu_residual_layernorm", "row",
             lambda q: bias_gelu_ln_case(*_rc(q, (16384, 4096), (256, 512)))),
    Workload("softmax_long", "row",
             lambda q: softmax_case(*_rc(q, (1024, 65536), (16, 8192)))),
    Workload("attention_softmax", "row",
             lambda q: attention_softmax_case(*_rc(q, (8, 12, 512), (1, 2, 64)))),
    Workload("cross_entropy", "row",
             lambda q: cross_entropy_case(*_rc(q, (4096, 32000), (64, 1000)))),
    # GPT-2's vocabulary: no vector divides the row (shifted tiles) and no register
    # file holds it (kept in dynamic shared memory)
    Workload("cross_entropy_gpt2", "row",
             lambda q: cross_entropy_case(*_rc(q, (4096, 50257), (64, 1001)))),
    # a GEMM with its elementwise epilogue: the GPU's block GEMM (stitch) against
    # cuBLAS plus an epilogue kernel (rules) and torch
    Workload("attention_scores", "gemm",
             lambda q: attention_scores_case(*_rc(q, (8, 12, 512, 64), (1, 2, 64, 16)))),
    Workload("attention", "gemm",
             lambda q: attention_case(*_rc(q, (8, 12, 512, 64), (1, 2, 64, 16)))),
    Workload("ffn_gelu", "gemm", lambda q: ffn_gelu_case(*_rc(q, (4096, 768, 3072),
                                                              (64, 64, 256)))),
    # GPT-2's causal attention at 1024 tokens: the key blocks past each tile's diagonal
    # skipped (fusion/key_limit.py)
    Workload("causal_attention", "gemm",
             lambda q: attention_case(*_rc(q, (8, 12, 1024, 64), (1, 2, 256, 16)),
                                      causal=True)),
    # the same in bfloat16: tensor cores (exact in TF32) for the generated kernels and
    # for cuBLAS, whatever --matmul-precision says
    Workload("causal_attention_bf16", "gemm",
             lambda q: attention_case(*_rc(q, (8, 12, 1024, 64), (1, 2, 256, 16)), "bfloat16",
                                      causal=True), dtype="bfloat16"),
    Workload("attention_bf16", "gemm",
             lambda q: attention_case(*_rc(q, (8, 12, 512, 64), (1, 2, 64, 16)), "bfloat16"),
             dtype="bfloat16"),
    Workload("ffn_gelu_bf16", "gemm", lambda q: ffn_gelu_case(
        *_rc(q, (4096, 768, 3072), (64, 64, 256)), "bfloat16"), dtype="bfloat16"),
    Workload("bert_layer", "model", bert_case),
    Workload("gpt2_block", "model", gpt2_case),
    Workload("llama_layer", "model", llama_case),
    Workload("softmax_bf16", "row",
             lambda q: bf16_row_case("softmax", *_rc(q, (32768, 4096), (256, 512))),
             big=True, dtype="bfloat16"),
    Workload("layernorm_bf16", "row",
             lambda q: bf16_row_case("layernorm", *_rc(q, (32768, 4096), (256, 512))),
             big=True, dtype="bfloat16"),
    Workload("rmsnorm_bf16", "row",
             lambda q: bf16_row_case("rmsnorm", *_rc(q, (32768, 4096), (256, 512))),
             big=True, dtype="bfloat16"),
]
BY_NAME = {w.name: w for w in WORKLOADS}
GROUPS = {"all": [w.name for w in WORKLOADS],
          "rows": [w.name for w in WORKLOADS if w.group == "row" and w.dtype == "float32"],
          "models": [w.name for w in WORKLOADS if w.group == "model"],
          "gemm": [w.name for w in WORKLOADS if w.group == "gemm"],
          "bf16": [w.name for w in WORKLOADS if w.dtype == "bfloat16"]}


def compulsory_bytes(graph) -> int:
    """Inputs and array constants read once, outputs written once (scalar constants are
    inlined as literals by the workbench, so they are not counted)."""
    total = 0
    for k in graph.inputs:
        v = graph.value(k)
        total += math.prod(v.shape) * v.dtype.itemsize
    for arr in graph.constants.values():
        if np.ndim(arr) > 0:
            total += np.asarray(arr).nbytes
    for k in graph.outputs:
        v = graph.value(k)
        total += math.prod(v.shape) * v.dtype.itemsize
    return int(total)


# -- one workload ----------------------------------------------------------------------------
class Runner:
    def __init__(self, dev: Device, T: Torch, args, copy_GBps: float | None):
        self.dev, self.T, self.args = dev, T, args
        self.copy_GBps = copy_GBps
        self.warmup, self.repeats = args.warmup, args.repeats

    # rows -------------------------------------------------------------------------------
    def _row(self, method: str, kind: str, latency_ms: float | None, counted: int | None,
             **extra) -> dict:
        r = {"method": method, "kind": kind, "status": "ok", "latency_ms": latency_ms,
             "bytes_counted": counted}
        if latency_ms and counted:
            gbps = counted / (latency_ms / 1e3) / 1e9
            r["GBps"] = gbps
            r["pct_copy"] = 100 * gbps / self.copy_GBps if self.copy_GBps else None
        r.update(extra)
        return r

    @staticmethod
    def _na(method: str, kind: str, status: str, reason: str, **extra) -> dict:
        return {"method": method, "kind": kind, "status": status, "error": reason, **extra}

    # the workbench ----------------------------------------------------------------------
    def workbench_rows(self, name: str, s: Session, min_bytes: int) -> dict:
        rows: dict = {}
        for p in self.args.planners:
            label = f"workbench {p}"
            log(f"[{name}] {label}: planning, compiling, checking, timing")
            t0 = time.perf_counter()
            try:
                rows[p] = self._workbench_row(name, s, p, min_bytes)
            except Exception as e:  # one method's failure must not stop the run
                log(f"[{name}] {label} failed: {short_error(e)}")
                rows[p] = self._na(label, "workbench", "failed", short_error(e),
                                   traceback=tail_traceback())
                try:   # the plan that failed (to compile, run or check), for a report
                    if p != "none" and s.plan.planner in (p, "stitch"):
                        rows[p]["plan_kernels"] = len(s.plan.groups)
                        rows[p]["plan"] = s.plan.describe()[:4000]
                except Exception:
                    pass
            rows[p]["wall_s"] = round(time.perf_counter() - t0, 2)
            r = rows[p]
            if r["status"] == "ok":
                log(f"[{name}] {label}: {r['latency_ms']:.4f} ms, {r['kernels']} kernels, "
                    f"{r['bytes_counted'] / 1e6:.1f} MB, ok={r['within_tolerance']}")
        return rows

    def _workbench_row(self, name: str, s: Session, p: str, min_bytes: int) -> dict:
        extra: dict = {}
        if p == "none":
            plan = s.history[0].plan
        elif p == "tuned":
            if not callable(getattr(s, "tune", None)):
                return self._na("workbench tuned", "workbench", "n/a",
                                "not available: Session has no tune() method yet")
            if s.plan.planner != "stitch":
                s.auto("stitch")
            before = s.plan
            measured_before = s.measured(before)
            t0 = time.perf_counter()
            s.tune()
            extra["tune_s"] = round(time.perf_counter() - t0, 3)
            plan = s.plan
            extra["changed_plan"] = plan != before
            m_now = s.measured(plan)
            # tune() measured this plan itself (with its own repeats): time it again the
            # way every other row is timed
            retime = m_now is not None and m_now is not measured_before
        else:
            t0 = time.perf_counter()
            plan = s.auto(p)
            extra["plan_s"] = round(time.perf_counter() - t0, 3)
        m = s.measure(plan, warmup=self.warmup, repeats=self.repeats)
        latency = m.latency_ms
        if p == "tuned" and retime:
            _, total = s.program(plan).time(s.inputs, self.warmup, self.repeats)
            latency = total * 1e3
            extra["note"] = "re-timed (tune() had measured it)"
        per = m.per_kernel
        measured = None
        if "dram_bytes" in getattr(per, "columns", ()):
            col = per["dram_bytes"].astype(float)
            if len(col) and not col.isna().any():
                measured = int(col.sum())
        if p in ("stitch", "tuned"):
            try:
                extra["decisions"] = [str(d) for d in s.step.decisions][:40]
            except Exception:
                pass
        if p == "stitch":
            extra.update(self._every_key(s, plan))
        return self._row(
            f"workbench {p}", "workbench", latency, int(m.bytes_moved),
            kernels=int(m.kernels), bytes_measured=measured,
            within_tolerance=bool(m.within_tolerance), max_rel_error=float(m.max_rel_error),
            end_to_end_error=float(m.end_to_end_error),
            predicted_ms=float(m.predicted_ms) if not math.isnan(m.predicted_ms) else None,
            GBps_min_bytes=min_bytes / (latency / 1e3) / 1e9 if latency else None,
            per_kernel=json.loads(per.to_json(orient="records")), **extra)

    def _every_key(self, s: Session, plan) -> dict:
        """A plan whose fused attentions skip the keys a causal mask hides, timed again
        with every block taken (launch skip=0), side by side: what the skip saves on
        this GPU, or costs (its checks read the skipped keys)."""
        every = attention_variants(plan).get("every key")
        if every is None:
            return {}
        m = s.measure(every[0], warmup=self.warmup, repeats=self.repeats)
        return {"every_key_ms": float(m.latency_ms),
                "every_key_within_tolerance": bool(m.within_tolerance)}

    # torch -------------------------------------------------------------------------------
    def torch_rows(self, name: str, case: Case, inputs: dict, min_bytes: int | None,
                   reference: dict | None, out_dtypes: list | None,
                   scale: dict | None = None) -> dict:
        """torch eager and torch.compile on the same inputs; their outputs held to the
        dtype's tolerance of the reference (with TF32, to TF32's bound: ``scale``, the
        whole graph's magnitudes, verify.graph_magnitudes)."""
        T = self.T
        rows: dict = {}
        if not T.ok:
            for key, label in TORCH_METHODS:
                rows[key] = self._na(label, "torch", "n/a", T.why)
            return rows
        torch = T.torch
        try:
            args = case.torch_args(T, inputs)
            fn = case.torch_fn(T)
        except Exception as e:
            log(f"[{name}] torch: setting up failed: {short_error(e)}")
            for key, label in TORCH_METHODS:
                rows[key] = self._na(label, "torch", "failed", short_error(e),
                                     traceback=tail_traceback())
            return rows
        for key, label in TORCH_METHODS:
            if key == "torch_compile" and self.args.no_compile:
                rows[key] = self._na(label, "torch", "n/a", "skipped (--no-compile)")
                continue
            log(f"[{name}] {label}")
            t0 = time.perf_counter()
            try:
                extra: dict = {}
                f = fn
                if key == "torch_compile":
                    f = torch.compile(fn)
                with torch.no_grad():
                    t1 = time.perf_counter()
                    outs = leaves(f(*args))
                    T.sync()
                    if key == "torch_compile":
                        extra["compile_s"] = round(time.perf_counter() - t1, 2)
                if min_bytes is None:   # no graph: the tensors' own sizes
                    min_bytes = (sum(a.numel() * a.element_size() for a in args)
                                 + sum(o.numel() * o.element_size() for o in outs))
                if reference is not None:
                    err, ok = 0.0, True
                    if len(outs) != len(reference):
                        raise RuntimeError(f"torch gave {len(outs)} outputs, the graph has "
                                           f"{len(reference)}")
                    for o, (k, ref), dt in zip(outs, reference.items(), out_dtypes):
                        got = T.to_numpy(o)
                        if got.size == np.size(ref):   # (a [rows] vs [rows, 1] spelling)
                            got = got.reshape(np.shape(ref))
                        e = max_rel_error(got, np.asarray(ref), (scale or {}).get(k))
                        err = max(err, e)
                        ok &= e <= tolerance(dt)
                    extra.update(max_rel_error=float(err), within_tolerance=bool(ok))
                del outs
                st = stats(T.time(lambda f=f: f(*args), self.warmup, self.repeats))
                rows[key] = self._row(label, "torch", st["latency_ms"], int(min_bytes),
                                      kernels=None, bytes_measured=None,
                                      latency_min_ms=st["latency_min_ms"],
                                      latency_max_ms=st["latency_max_ms"],
                                      spread_pct=st["spread_pct"], **extra)
                log(f"[{name}] {label}: {st['latency_ms']:.4f} ms")
            except Exception as e:
                log(f"[{name}] {label} failed: {short_error(e)}")
                rows[key] = self._na(label, "torch", "failed", short_error(e),
                                     traceback=tail_traceback())
            rows[key]["wall_s"] = round(time.perf_counter() - t0, 2)
        return rows

    # a workload ----------------------------------------------------------------------------
    def run(self, w: Workload) -> dict:
        t0 = time.perf_counter()
        res: dict = {"workload": w.name, "group": w.group, "dtype": w.dtype, "big": w.big,
                     "methods": {}}
        log(f"[{w.name}] building")
        s = None
        try:
            case = w.build(self.args.quick)
        except Exception as e:
            log(f"[{w.name}] could not be built: {short_error(e)}")
            res.update(status="failed", error=short_error(e), traceback=tail_traceback())
            return res
        res["description"] = case.description
        reference = out_dtypes = scale = None
        min_bytes = None
        if case.graph is not None:
            g = case.graph
            res["nodes"] = len(g.nodes)
            res["inputs"] = {k: [list(g.value(k).shape), g.value(k).dtype.value]
                             for k in g.inputs}
            min_bytes = compulsory_bytes(g)
            res["min_bytes"] = min_bytes
            try:
                s = Session(g, backend=self.args.backend,
                            matmul_precision=self.args.matmul_precision)
                inputs = s.inputs
                t1 = time.perf_counter()
                reference = s.reference
                if self.args.matmul_precision == "tf32":   # (torch's held to TF32's bound)
                    from workbench.measure.verify import graph_magnitudes
                    scale = graph_magnitudes(g, inputs, tf32=True)
                res["reference_s"] = round(time.perf_counter() - t1, 2)
                out_dtypes = [g.value(k).dtype for k in g.outputs]
            except Exception as e:
                log(f"[{w.name}] workbench session failed: {short_error(e)}")
                res["methods"] = {p: self._na(f"workbench {p}", "workbench", "failed",
                                              short_error(e)) for p in self.args.planners}
                res["error"] = short_error(e)
                res["traceback"] = tail_traceback()
                s, reference = None, None
                from workbench.runtime import random_inputs   # torch still runs
                inputs = random_inputs(g, 0)
            if s is not None:
                res["methods"].update(self.workbench_rows(w.name, s, min_bytes))
        else:
            res["unsupported"] = case.unsupported
            res["methods"] = {p: self._na(f"workbench {p}", "workbench", "unsupported",
                                          case.unsupported) for p in self.args.planners}
            inputs = case.fallback_inputs() if case.fallback_inputs else None
        if s is not None:   # give the GPU memory of the workbench's buffers back first
            self.dev.cleanup()
        res["methods"].update(self.torch_rows(w.name, case, inputs, min_bytes, reference,
                                              out_dtypes, scale))
        if min_bytes is None:
            tr = res["methods"].get("torch_eager", {})
            min_bytes = tr.get("bytes_counted")
            res["min_bytes"] = min_bytes
        comp = res["methods"].get("torch_compile", {}).get("latency_ms")
        for r in res["methods"].values():
            if comp and r.get("latency_ms"):
                r["speedup_vs_compile"] = comp / r["latency_ms"]
        del s, case
        inputs = reference = None
        self.dev.cleanup(self.T.torch)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        return res


# -- reporting ---------------------------------------------------------------------------------
METHOD_ORDER = list(PLANNERS) + ["torch_eager", "torch_compile"]


def _fmt(x, f: str, na: str = "n/a") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return na
    return f.format(x)


def _mb(x) -> str:
    return "n/a" if x is None else f"{x / 1e6:.1f}"


def method_table(res: dict) -> list[str]:
    lines = ["| method | ms | GB/s | % copy | kernels | counted MB | measured MB "
             "| vs torch.compile | matches reference | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    ms = res.get("methods", {})
    for key in [k for k in METHOD_ORDER if k in ms] + [k for k in ms if k not in METHOD_ORDER]:
        r = ms[key]
        if r.get("status") != "ok":
            lines.append(f"| {r.get('method', key)} | {r.get('status')} | | | | | | | | "
                         f"{(r.get('error') or '').replace('|', '/')} |")
            continue
        ok = r.get("within_tolerance")
        match = "n/a" if ok is None else ("yes" if ok else "**NO**")
        if r.get("max_rel_error") is not None:
            match += f" ({r['max_rel_error']:.1e})"
        note = r.get("note", "")
        if r.get("compile_s") is not None:
            note = f"compiled in {r['compile_s']:.1f} s"
        if r.get("kind") == "workbench" and r.get("changed_plan") is False:
            note = (note + "; " if note else "") + "tune() kept the stitch plan"
        lines.append(
            f"| {r['method']} | {_fmt(r.get('latency_ms'), '{:.4f}')} | "
            f"{_fmt(r.get('GBps'), '{:.0f}')} | {_fmt(r.get('pct_copy'), '{:.1f}%')} | "
            f"{_fmt(r.get('kernels'), '{}', '')} | {_mb(r.get('bytes_counted'))} | "
            f"{_mb(r.get('bytes_measured'))} | {_fmt(r.get('speedup_vs_compile'), '{:.2f}x')} | "
            f"{match} | {note} |")
    return lines


def markdown(result: dict) -> str:
    m, d = result["machine"], result["device"]
    cb = result.get("copy", {})
    v = result["versions"]
    lines = [f"# GPU benchmark: workbench planners vs torch eager and torch.compile "
             f"({d.get('device')})", "",
             f"**Device:** {d.get('device')}"
             + "".join(f", {fmt.format(d[k])}" for k, fmt in (
                 ("sms", "{} SMs"), ("memory_GiB", "{} GiB"), ("l2_MB", "L2 {} MB"),
                 ("compute_capability", "compute capability {}")) if k in d)
             + (f" (nvidia-smi: {d['nvidia_smi']})" if d.get("nvidia_smi") else "")
             + f"; backend `{d.get('backend')}`; float32 matmuls "
             + ("in TF32 (tensor cores, torch's allow_tf32 too)"
                if result.get("matmul_precision") == "tf32" else "exact (no TF32)") + "  ",
             f"**Host:** {m.get('cpu')}, {m.get('cores')} cores, {m.get('os')}  ",
             f"**Versions:** Python {m.get('python')}, NumPy {m.get('numpy')}, "
             f"torch {v.get('torch')} (CUDA {v.get('torch_cuda')}), transformers "
             f"{v.get('transformers')}, triton {v.get('triton')}, CuPy {d.get('cupy', 'n/a')}, "
             f"CUDA driver {d.get('cuda_driver', 'n/a')}, runtime {d.get('cuda_runtime', 'n/a')}"
             f", NVRTC {d.get('nvrtc', 'n/a')}  ",
             f"**Run:** {m.get('date')}, commit `{m.get('git_commit')}`, repeats "
             f"{result['repeats']} (warm-up {result['warmup']}), median; "
             f"{'CUDA events' if d.get('backend') == 'cupy' else 'wall clock'}"
             f"{', --quick (tiny sizes)' if result['quick'] else ''}"
             f"{'' if result.get('complete') else ', PARTIAL (run not finished)'}  ",
             f"**Copy bandwidth:** {_fmt(cb.get('GBps'), '{:.0f}')} GB/s "
             f"({cb.get('method', 'n/a')}, {_mb(cb.get('buffer_bytes'))} MB buffer, "
             f"read + write counted"
             + (f"; torch copy_ {cb['torch_copy_GBps']:.0f} GB/s"
                if isinstance(cb.get("torch_copy_GBps"), float) else "") + ")",
             ""]
    if cb.get("error"):
        lines += [f"Copy bandwidth failed: {cb['error']}", ""]
    for res in result["workloads"]:
        lines += [f"## {res['workload']}", "",
                  f"{res.get('description', '')}; compulsory bytes "
                  f"{_mb(res.get('min_bytes'))} MB", ""]
        if res.get("status") == "failed":
            lines += [f"Failed: {res.get('error')}", ""]
            continue
        lines += method_table(res) + [""]
        st = res.get("methods", {}).get("stitch", {})
        if st.get("every_key_ms"):
            lines += [f"The causal skip: stitch {st['latency_ms']:.4f} ms against "
                      f"{st['every_key_ms']:.4f} ms for the same plan taking every block "
                      f"(skip=0), {st['every_key_ms'] / st['latency_ms']:.2f}x.", ""]
        eager = res.get("methods", {}).get("torch_eager", {})
        if eager.get("within_tolerance") is False:
            lines += [f"torch eager is outside the tolerance too (error "
                      f"{eager.get('max_rel_error', float('nan')):.1e}): float32 rounding "
                      f"(matmul accumulation order) differs from the NumPy reference by more "
                      f"than the tolerance at this size, so a workbench NO here is not "
                      f"by itself a wrong kernel (compare the errors).", ""]
    lines += ["GB/s: workbench rows count their own `bytes_moved` (compulsory traffic of "
              "each kernel from the kernel IR, intermediates of unfused plans included); "
              "torch rows the workload's compulsory bytes (inputs and parameters read "
              "once, outputs written once). % copy: of the copy bandwidth above. measured "
              "MB: DRAM bytes from hardware counters where the workbench reports them. "
              "vs torch.compile: torch.compile ms / this row's ms. matches reference: "
              "within the dtype's tolerance of the NumPy reference (worst relative error).",
              "", "## Targets", ""] + [f"- {x}" for x in result.get("targets", [])]
    return "\n".join(lines) + "\n"


def targets(result: dict) -> list[str]:
    """PASS / MISS / SKIP lines for the targets (never change the exit status)."""
    out = []
    rows = [r for r in result["workloads"] if r["group"] == "row"]
    ratios: dict[str, list[float]] = {"stitch": [], "tuned": []}
    if result["quick"]:
        out.append("NOTE --quick: tiny sizes, so the targets below are not meaningful")
    for r in rows:
        ms = r.get("methods", {})
        want = TARGET_COPY_BIG if r["big"] else TARGET_COPY_OTHER
        for p in ("stitch", "tuned"):
            x = ms.get(p)
            if x is None:
                continue
            if x.get("status") != "ok":
                out.append(f"SKIP {r['workload']} {p}: {x.get('status')}: "
                           f"{(x.get('error') or '')[:120]}")
                continue
            pct = x.get("pct_copy")
            if pct is None:
                out.append(f"SKIP {r['workload']} {p}: no copy bandwidth to compare with")
            else:
                eff = ""
                if x.get("GBps_min_bytes") and result.get("copy", {}).get("GBps") and \
                        x.get("bytes_counted") != r.get("min_bytes"):
                    eff = (f"; {100 * x['GBps_min_bytes'] / result['copy']['GBps']:.1f}% "
                           f"on the workload's compulsory bytes")
                out.append(f"{'PASS' if pct >= 100 * want else 'MISS'} {r['workload']} {p}: "
                           f"{pct:.1f}% of copy bandwidth (want >= {100 * want:.0f}%){eff}")
            sp = x.get("speedup_vs_compile")
            if sp is None:
                why = ms.get("torch_compile", {}).get("error") or "no torch.compile time"
                out.append(f"SKIP {r['workload']} {p} vs torch.compile: {why[:120]}")
            else:
                ratios[p].append(sp)
                out.append(f"{'PASS' if sp >= TARGET_VS_COMPILE else 'MISS'} {r['workload']} "
                           f"{p}: {sp:.2f}x torch.compile (want >= {TARGET_VS_COMPILE:g}x)")
    for p, xs in ratios.items():
        if xs:
            gm = math.exp(sum(math.log(x) for x in xs) / len(xs))
            out.append(f"{'PASS' if gm >= TARGET_VS_COMPILE_GEOMEAN else 'MISS'} {p}: "
                       f"geometric mean {gm:.2f}x torch.compile over {len(xs)} row workloads "
                       f"(want >= {TARGET_VS_COMPILE_GEOMEAN:g}x)")
    for r in result["workloads"]:
        if r["workload"] not in ("bert_layer", "gpt2_block"):
            continue
        ms = r.get("methods", {})
        st = ms.get("stitch", {})
        for base, want in (("rules", TARGET_MODEL_VS_RULES), ("xla", TARGET_MODEL_VS_XLA)):
            b = ms.get(base, {})
            if st.get("status") != "ok" or b.get("status") != "ok":
                why = st.get("error") if st.get("status") != "ok" else b.get("error")
                out.append(f"SKIP {r['workload']} stitch vs {base}: {(why or 'not run')[:120]}")
                continue
            sp = b["latency_ms"] / st["latency_ms"]
            out.append(f"{'PASS' if sp >= want else 'MISS'} {r['workload']}: stitch "
                       f"{sp:.2f}x {base} (want >= {want:g}x)")
    return out


def summary_lines(result: dict) -> list[str]:
    cb = result.get("copy", {})
    lines = [f"== summary: {result['device'].get('device')}, copy "
             f"{_fmt(cb.get('GBps'), '{:.0f}')} GB/s"
             f"{', quick' if result['quick'] else ''} =="]
    for r in result["workloads"]:
        ms = r.get("methods", {})
        if r.get("status") == "failed":
            lines.append(f"{r['workload']:<29} FAILED: {r.get('error', '')[:90]}")
            continue
        parts = []
        for key in ("none", "rules", "stitch", "tuned", "torch_eager", "torch_compile"):
            x = ms.get(key)
            if x is None:
                continue
            tag = {"torch_eager": "eager", "torch_compile": "compile"}.get(key, key)
            if x.get("status") == "ok":
                flag = "" if x.get("within_tolerance") in (True, None) else \
                    f" (err {x.get('max_rel_error', float('nan')):.1e} > tolerance)"
                pct = x.get("pct_copy")
                parts.append(f"{tag} {x['latency_ms']:.3f}ms"
                             + (f"/{pct:.0f}%" if pct is not None and key != "none" else "")
                             + flag)
            else:
                parts.append(f"{tag} {x.get('status')}")
        lines.append(f"{r['workload']:<29} " + ", ".join(parts))
    return lines


def write(result: dict, out: Path, stamp: str) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    slug = result["device"].get("slug", "device")
    if result.get("matmul_precision", "float32") != "float32":   # (beside float32's)
        slug += "-" + result["matmul_precision"]
    jp, mp = out / f"gpu-{slug}-{stamp}.json", out / f"gpu-{slug}.md"
    for path, text in ((jp, json.dumps(result, indent=1, default=str)),
                       (mp, markdown(result))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return jp, mp


# -- main --------------------------------------------------------------------------------------
def pick_backend(name: str | None) -> str:
    if name:
        return name
    from workbench.runtime.cupy_backend import gpu_available
    return "cupy" if gpu_available() else "cpu"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes (rows 256x512, layers at batch 1, seq 64, hidden 128), "
                        "5 repeats, 2 warm-ups")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per method "
                   "(median; default 30, 5 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help="default 5, 2 with --quick")
    p.add_argument("--out", default=str(RESULTS), metavar="DIR")
    p.add_argument("--workloads", nargs="+", metavar="NAME",
                   help="subset: " + ", ".join(BY_NAME) + "; or a group: "
                        + ", ".join(GROUPS))
    p.add_argument("--planners", nargs="+", default=list(PLANNERS), choices=PLANNERS)
    p.add_argument("--backend", choices=("cupy", "cpu"), default=None,
                   help="cupy (the GPU; default when one is found) or cpu")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--matmul-precision", choices=("float32", "tf32"), default="float32",
                   help="float32 matmuls exact (default) or in TF32 on tensor cores: the "
                        "workbench's and torch's alike (allow_tf32), side by side")
    args = p.parse_args(argv)
    args.repeats = args.repeats or (5 if args.quick else 30)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    names: list[str] = []
    for n in args.workloads or ["all"]:
        if n in GROUPS:
            names += GROUPS[n]
        elif n in BY_NAME:
            names.append(n)
        else:
            p.error(f"unknown workload {n!r}; choose from {', '.join(BY_NAME)} or "
                    f"{', '.join(GROUPS)}")
    names = list(dict.fromkeys(names))
    args.planners = [x for x in PLANNERS if x in args.planners]   # tuned after stitch
    args.backend = pick_backend(args.backend)

    t_start = time.perf_counter()
    machine = machine_info()
    try:
        from workbench.runtime import get_backend
        get_backend(args.backend)        # says why it cannot run here, if it cannot
        dev = Device(args.backend, machine.get("cpu", "cpu"))
    except Exception as e:
        log(f"error: backend {args.backend} cannot run here: {short_error(e)}")
        return 2
    T = Torch(dev, tf32=args.matmul_precision == "tf32")
    dev_info = dev.info()
    dev_info["slug"] = dev.slug
    stamp = _dt.datetime.now().strftime("%Y-%m-%d")
    out = Path(args.out)
    result = {"benchmark": "gpu", "machine": machine, "device": dev_info,
              "versions": T.version(), "repeats": args.repeats, "warmup": args.warmup,
              "quick": args.quick, "backend": args.backend, "planners": args.planners,
              "matmul_precision": args.matmul_precision,
              "workload_names": names, "workloads": [], "complete": False,
              "argv": sys.argv[1:] if argv is None else list(argv)}
    log(f"device: {dev_info.get('device')} (backend {args.backend}); torch "
        f"{result['versions'].get('torch')}; {len(names)} workloads, planners "
        f"{' '.join(args.planners)}, repeats {args.repeats}, warm-up {args.warmup}")

    log("copy bandwidth")
    try:
        result["copy"] = copy_bandwidth(dev, args.quick, args.warmup, args.repeats, T)
        log(f"copy bandwidth: {result['copy']['GBps']:.1f} GB/s")
    except Exception as e:
        log(f"copy bandwidth failed: {short_error(e)}")
        result["copy"] = {"error": short_error(e), "traceback": tail_traceback()}
    write(result, out, stamp)

    runner = Runner(dev, T, args, result["copy"].get("GBps"))
    for i, name in enumerate(names, 1):
        log(f"== {i}/{len(names)} {name}")
        try:
            res = runner.run(BY_NAME[name])
        except Exception as e:   # anything the per-method guards missed
            log(f"[{name}] failed: {short_error(e)}")
            res = {"workload": name, "group": BY_NAME[name].group, "big": BY_NAME[name].big,
                   "dtype": BY_NAME[name].dtype, "status": "failed",
                   "error": short_error(e), "traceback": tail_traceback(), "methods": {}}
            dev.cleanup(T.torch)
        result["workloads"].append(res)
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        result["targets"] = targets(result)
        write(result, out, stamp)       # partial results survive a timeout

    result["complete"] = True
    result["wall_s"] = round(time.perf_counter() - t_start, 1)
    result["targets"] = targets(result)
    jp, mp = write(result, out, stamp)
    md = markdown(result)
    print(md.split("\n## Targets")[0])
    print("\n".join(summary_lines(result)))
    print("\n".join(result["targets"]))
    print(f"wrote {jp} and {mp} ({result['wall_s']} s)")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
