"""Loading an artifact as a callable model that runs its shipped kernels.

The artifact is verified first (:mod:`.verify`); only then are its shipped sources
compiled -- never regenerated: the C sources with the system compiler into the same
cache the CPU backend uses, the CUDA sources with CuPy's NVRTC. Kernels run in the
manifest's order through the runtime's shared run loop
(:class:`~workbench.runtime.program.KernelSequence`: library calls for opaque ops;
nothing poisoned, as a production call of a program poisons nothing: the export's
checks ran the kernels poisoned). Nothing here imports Jupyter or plotly.

``model(x, y)`` (positional, in ``model.inputs`` order) or ``model(x=..., y=...)``
returns a dict of outputs in ``model.outputs`` order: NumPy arrays for NumPy inputs,
CuPy arrays for CuPy inputs. ``model.run({"x": x}, out=outs)`` writes them into the
caller's arrays (``outs = model.new_outputs()``, reused call after call: no allocation).

Example::

    >>> model = load_artifact("ln.zip")                      # doctest: +SKIP
    >>> model(np.ones((4096, 1024), np.float32))["y"].shape  # doctest: +SKIP
    (4096, 1024)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..codegen.kir import Buffer, Scratch
from ..codegen.kernel import Kernel, Launch, LibraryCall
from ..errors import ArtifactError, BackendUnavailable, GraphError, WorkbenchError
from ..dtypes import DType
from ..ir import Graph
from ..ir.graph import freeze_attr
from ..runtime.backends import backend_names
from ..runtime.program import KernelSequence
from .manifest import KernelSpec, Manifest, TensorSpec
from .messages import one_line
from .sign import trusted
from .verify import Artifact, read_artifact
from ..runtime import get_backend
from .. import arguments as args


def load_artifact(path: str | Path, backend: str = "auto", *, trusted_keys=None,
                  require_signature: bool | None = None) -> "ArtifactModel":
    """Verify the artifact at ``path`` (directory or .zip) and return a callable model.

    Loading an artifact runs its code: its kernel sources are compiled and loaded
    (``backend="cpu"`` here, ``"auto"`` at the first call), and compiled code can do
    anything the process can. Load only artifacts you trust, as you would a pickle --
    or ask for a signature:

    ``trusted_keys``: keys (:class:`~workbench.artifact.HmacKey`,
    :class:`~workbench.artifact.Ed25519Key`, or ``pathlib.Path`` key files; never bare
    bytes, see :mod:`.sign`) one of which must have signed the artifact; checked
    before anything else of it is read. ``require_signature``: refuse an unsigned
    artifact; implied (True) when ``trusted_keys`` is given (even an empty list: then
    nothing loads), and needs at least one key. ``require_signature=False`` with keys
    verifies a signed artifact and accepts an unsigned one.

    ``backend``: ``"auto"`` runs NumPy inputs on the CPU and CuPy inputs on the GPU,
    compiling each target's sources on its first call; ``"cpu"`` / ``"cupy"`` compile
    that target now; ``"reference"`` runs each kernel's ops with NumPy. A changed,
    truncated, foreign, newer, malformed or (when asked) unsigned artifact raises
    :class:`ArtifactError` (one line) before anything is compiled.
    """
    if not isinstance(backend, str) or backend not in backend_names():
        raise WorkbenchError(f"unknown backend {backend!r:.40}; choose one of "
                             f"{', '.join(backend_names())}")
    if require_signature is not None:
        args.flag(require_signature, "require_signature")
    keys = trusted(trusted_keys)
    # trusted_keys given (even an empty list) asks for a signature: fail closed
    required = (trusted_keys is not None) if require_signature is None \
        else bool(require_signature)
    if required and not keys:
        raise ArtifactError("require_signature=True needs trusted_keys=[...] with at least "
                            "one key: the keys (or shared secrets) whose signatures you trust")
    try:
        model = ArtifactModel(read_artifact(path, keys, required), backend)
        if backend != "auto":
            model.runner(backend)
    except (ArtifactError, BackendUnavailable):
        raise
    except WorkbenchError as e:
        raise ArtifactError(f"artifact {path}: {one_line(str(e))}; re-export the "
                            "artifact") from None
    except Exception as e:  # noqa: BLE001 -- the last line (RecursionError, MemoryError...)
        # of defence: whatever a malformed artifact trips on is reported, not raised
        raise ArtifactError(f"artifact {path} is malformed ({type(e).__name__}: "
                            f"{one_line(str(e), 200)}); re-export the artifact") from None
    return model


def _with_dtype(d: Mapping[str, Any]) -> dict:
    return {**d, "dtype": DType.of(d["dtype"])}


def _scratch(d: Mapping[str, Any]) -> Scratch:
    d = _with_dtype(d)
    src = d.get("source")
    if src is not None:     # a buffer, or a thread's tile (see manifest.scratch)
        d["source"] = (Buffer(**_with_dtype(src)) if "is_output" in src
                       else _scratch(src))
    if d.get("home") is not None:    # the output whose row holds the value (a buffer)
        d["home"] = Buffer(**_with_dtype(d["home"]))
    return Scratch(**d)


def rebuild_kernel(spec: KernelSpec, g: Graph, where: str) -> Kernel:
    """A ``kernel.Kernel`` with the manifest's parameters, launch, scratch and library call
    (no body: the shipped source is what runs), checked against the graph's values so
    that no kernel is handed a buffer of the wrong size."""
    try:
        bufs = tuple(Buffer(**_with_dtype(p)) for p in spec.params)
        for b in bufs:
            if b.workspace:           # the kernel's own memory, not a graph value
                continue
            try:
                v = g.value(b.value)
            except GraphError:
                v = None
            if v is None or v.numel != b.numel or v.dtype is not b.dtype:
                raise ArtifactError(f"artifact {where}: kernel {spec.name} parameter "
                                    f"{b.name} does not match the graph's value; re-export "
                                    "the artifact")
        by_value = {b.value: b for b in bufs}
        lib = None
        if spec.library is not None:
            c = spec.library
            lib = LibraryCall(c.op, tuple(sorted((k, freeze_attr(v)) for k, v in
                                                 c.attrs.items())),
                              tuple(by_value[x] for x in c.inputs),
                              tuple(by_value[x] for x in c.outputs))
        k = Kernel(name=spec.name, group=spec.group, schedule=spec.schedule, params=bufs,
                   body=(), launch=Launch.from_json(spec.launch), library=lib,
                   scratch=tuple(_scratch(x) for x in spec.scratch),
                   **spec.fields)
    except ArtifactError:
        raise
    except (TypeError, KeyError, ValueError) as e:
        raise ArtifactError(f"artifact {where}: kernel {spec.name} has fields this "
                            f"workbench cannot read ({type(e).__name__}: {e}); upgrade "
                            "fusion-workbench or re-export the artifact") from None
    if k.shared_bytes != spec.shared_bytes:
        raise ArtifactError(f"artifact {where}: kernel {spec.name} shared memory does not "
                            "add up; re-export the artifact")
    return k


# -- compiling the shipped sources --------------------------------------------------
_SHIPPED = "load the artifact with the workbench version that made it, or re-export it"


class _Runner(KernelSequence):
    """The shared run loop, with inputs checked without converting device arrays."""

    def __init__(self, graph, backend, compiled, group_nodes, specs):
        super().__init__(graph, backend, compiled, group_nodes)
        self.specs = specs

    def check_inputs(self, inputs: Mapping[str, Any]) -> dict:
        return check_inputs(self.specs, inputs)


def check_inputs(specs: tuple[TensorSpec, ...], inputs: Mapping[str, Any]) -> dict:
    """Every input present with its declared shape and dtype (NumPy or CuPy arrays)."""
    out = {}
    for t in specs:
        if t.name not in inputs:
            raise GraphError(f"missing input {t.name!r}; the model takes "
                             + ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in specs))
        a = inputs[t.name]
        if not hasattr(a, "__array_interface__") and not hasattr(a, "__cuda_array_interface__"):
            a = np.asarray(a)
        if tuple(a.shape) != t.shape:
            raise GraphError(f"input {t.name!r} has shape {list(a.shape)}, the model expects "
                             f"{list(t.shape)}")
        if np.dtype(a.dtype) != np.dtype(t.dtype):
            raise GraphError(f"input {t.name!r} has dtype {a.dtype}, the model expects "
                             f"{t.dtype}; convert it with .astype")
        out[t.name] = a if a.flags.c_contiguous else a.copy(order="C")
    return out


def _is_cupy(a) -> bool:
    return type(a).__module__.split(".")[0] == "cupy"


class ArtifactModel:
    """An exported plan, verified and ready to run.

    ``inputs`` / ``outputs``: :class:`TensorSpec` s in call order; ``manifest``: the
    :class:`Manifest`; ``graph``: the rebuilt graph. Calling it returns a dict
    ``{output name: array}`` in ``outputs`` order.
    """

    def __init__(self, artifact: Artifact, backend: str = "auto"):
        self.artifact = artifact
        self.manifest: Manifest = artifact.manifest
        self.graph: Graph = artifact.graph
        self.backend = backend
        self.inputs: tuple[TensorSpec, ...] = self.manifest.inputs
        self.outputs: tuple[TensorSpec, ...] = self.manifest.outputs
        where = artifact.where
        self.kernels = [rebuild_kernel(k, self.graph, where) for k in self.manifest.kernels]
        self._group_nodes = {gr.id: gr.nodes for gr in self.manifest.groups}
        missing = [k.group for k in self.kernels if k.group not in self._group_nodes]
        if missing:
            raise ArtifactError(f"artifact {where}: kernel group {missing[0]} is not in the "
                                "plan; re-export the artifact")
        self._runners: dict[str, _Runner] = {}

    def __repr__(self) -> str:
        sig = lambda ts: ", ".join(f"{t.name}: {t.dtype}{list(t.shape)}" for t in ts)
        return (f"ArtifactModel({self.manifest.graph_name!r}, {len(self.kernels)} kernels, "
                f"planner={self.manifest.planner!r}, ({sig(self.inputs)}) -> "
                f"({sig(self.outputs)}))")

    def sources(self, target: str) -> dict[str, str]:
        """Kernel name -> shipped source for target 'c' or 'cuda' (library calls have none)."""
        return {k.name: self.artifact.files[k.sources[target]].decode()
                for k in self.manifest.kernels if target in k.sources}

    def runner(self, backend: str) -> _Runner:
        """The shipped kernels compiled for a backend ('cpu', 'cupy', 'reference'...),
        each in the backend's source language (compiled once)."""
        if backend not in self._runners:
            be = get_backend(backend)
            sources = self.sources(be.target) if be.target else {}
            lacking = [k.name for k in self.manifest.kernels
                       if be.target and k.library is None and be.target not in k.sources]
            if lacking:       # (a host-only kernel, the CPU's form: it ships C only)
                raise BackendUnavailable(
                    f"artifact {self.artifact.where}: kernel {lacking[0]} has no "
                    f"{be.target} source (a CPU plan's GEMM and plane-at-a-time pooling "
                    "kernels run on the CPU backend only); load it with backend='cpu', or "
                    "export a plan made for the GPU")
            try:
                compiled = be.compile_sources(self.kernels, sources, origin=_SHIPPED)
            except (ArtifactError, BackendUnavailable):
                raise
            except WorkbenchError as e:     # a compiler's message: its first error line
                raise ArtifactError(f"artifact {self.artifact.where}: shipped "
                                    f"{one_line(str(e))}; {_SHIPPED}") from None
            self._runners[backend] = _Runner(self.graph, be, compiled, self._group_nodes,
                                             self.inputs)
        return self._runners[backend]

    def _bind(self, args, kwargs) -> dict:
        if len(args) > len(self.inputs):
            raise GraphError(f"the model takes {len(self.inputs)} inputs "
                             f"({', '.join(t.name for t in self.inputs)}), got {len(args)}")
        named = {t.name: a for t, a in zip(self.inputs, args)}
        for k, v in kwargs.items():
            if k not in {t.name for t in self.inputs}:
                raise GraphError(f"unknown input {k!r}; the model takes "
                                 + ", ".join(t.name for t in self.inputs))
            if k in named:
                raise GraphError(f"input {k!r} given twice (positionally and by name)")
            named[k] = v
        return named

    def __call__(self, *args, **kwargs) -> dict:
        """Run on inputs given positionally (``model.inputs`` order) or by name."""
        return self.run(self._bind(args, kwargs))

    def new_outputs(self, backend: str = "cpu") -> dict:
        """New arrays, one per output, for ``run(inputs, out=...)`` on ``backend``."""
        return self.runner(backend).new_outputs()

    def run(self, inputs: Mapping[str, Any], out: Mapping[str, Any] | None = None,
            checked: bool = False) -> dict:
        """Run on ``inputs`` (input name -> array); ``out`` (output name -> array, as
        :meth:`new_outputs` makes them) receives the outputs and is returned, so a
        caller reusing it pays no allocation; ``checked=True`` poisons the outputs
        before the kernels write them (an element no kernel wrote reads NaN)."""
        named = self._bind((), args.mapping(inputs, "inputs"))
        on_gpu = any(_is_cupy(a) for a in named.values())
        backend = self.backend
        if backend == "auto":
            backend = "cupy" if on_gpu else "cpu"
        elif on_gpu and backend != "cupy":
            raise WorkbenchError(f"CuPy inputs given to a model loaded with backend "
                                 f"{backend!r}; pass NumPy arrays or load it with "
                                 "backend='auto' or 'cupy'")
        r = self.runner(backend)
        env = r.execute(named, out=out, checked=args.flag(checked, "checked"))
        if on_gpu:
            return {t.name: env[t.name] for t in self.outputs}
        return {t.name: r.backend.to_numpy(env[t.name], DType.of(t.dtype))
                for t in self.outputs}

    def as_torch_module(self):
        """A ``torch.nn.Module`` running this model on tensors (through DLPack)."""
        from .torch_module import ArtifactModule
        return ArtifactModule(self)
