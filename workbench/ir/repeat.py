"""A repeat: one body graph run a constant number of times, its state carried along.

A :class:`Repeat` is what an RL simulator's rollout, an ONNX ``Loop``/``Scan`` or
torch's ``scan``/``while_loop`` over a counter are: a body :class:`Graph` (one step),
a trip count fixed when the graph is built, and three kinds of body inputs:

- **carried** (``state``): pairs (body input, body output); step t+1 reads what step t
  wrote. The repeat's input of that name is the state before step 0, and its output
  named as the body output is the state after the last step.
- **stacked** inputs: the repeat's input of that name has a leading axis of ``trips``
  and step t reads slice t (an action per step; the reset states of a simulator).
- **invariant**: every other body input, the same array at every step (parameters).
- **counters** the repeat itself supplies (optional): ``step_input``, an integer scalar
  the body reads as its step index t (0 .. trips-1, the same in every fused or unfused
  form), and ``index_input``, an integer value of the state's shape holding each
  element's flat index (an environment's index along the batch axis for a (n,)
  state). They are what a counter-based random op (``ops/random.py``) is keyed by, so a
  simulator's noise is a function of (seed, environment, step) whatever the kernels.

Body outputs not carried are **stacked** outputs: the repeat's output of that name
has a leading axis of ``trips`` (rewards, termination masks). ``batch_axis`` is the
axis of the carried and stacked body values along which the environments are
independent: the fused code (``codegen/repeat_c.py``) runs environments in any order
and in any tiles, and refuses a body that mixes them (a reduction across it).

The repeat stands beside :class:`Graph` as its own value rather than as a node of
one: it is the unit the repeat's session, codegen, importers and JSON form handle
(``docs/repeat.md``).

Example::

    >>> import workbench as wb
    >>> b = wb.GraphBuilder("count")
    >>> x = b.input("x", (8,))
    >>> b.output(x + 1.0, "x_next")
    >>> r = wb.repeat(b.build(), 5, {"x": "x_next"})
    >>> r.outputs
    ('x_next',)
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import GraphError
from ..ops import evaluate_node
from .graph import Graph, Value
from .printer import format_graph
from . import nested

FORMAT, VERSION = "workbench.repeat", 1
# a trip count is a number of kernel-loop iterations: int64 in every kernel
MAX_TRIPS = 2 ** 31 - 1


@dataclass(frozen=True, eq=False)
class Repeat:
    """``body`` run ``trips`` times; see the module docstring for the roles."""
    name: str
    body: Graph
    trips: int
    carried: tuple[tuple[str, str], ...]       # (body input, body output)
    stacked_inputs: tuple[str, ...] = ()
    batch_axis: int = 0
    step_input: str | None = None               # body input: the step index t
    index_input: str | None = None              # body input: each element's flat index

    # -- roles ---------------------------------------------------------------------
    @property
    def carried_inputs(self) -> tuple[str, ...]:
        return tuple(i for i, _ in self.carried)

    @property
    def carried_outputs(self) -> tuple[str, ...]:
        return tuple(o for _, o in self.carried)

    @property
    def counter_inputs(self) -> tuple[str, ...]:
        """The body inputs the repeat supplies itself (step index, element index)."""
        return tuple(c for c in (self.step_input, self.index_input) if c is not None)

    @property
    def invariant_inputs(self) -> tuple[str, ...]:
        taken = set(self.carried_inputs) | set(self.stacked_inputs) | set(self.counter_inputs)
        return tuple(i for i in self.body.inputs if i not in taken)

    @property
    def stacked_outputs(self) -> tuple[str, ...]:
        carried = set(self.carried_outputs)
        return tuple(o for o in self.body.outputs if o not in carried)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The repeat's inputs, in the body's input order (counters are not inputs)."""
        counters = set(self.counter_inputs)
        return tuple(i for i in self.body.inputs if i not in counters)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Final carried states, then stacked outputs (in the body's output order)."""
        return self.carried_outputs + self.stacked_outputs

    def value(self, name: str) -> Value:
        """The repeat's own input or output ``name`` (stacked ones with the trips axis)."""
        v = self.body.value(name)
        if name in self.stacked_inputs or name in self.stacked_outputs:
            return Value(name, (self.trips, *v.shape), v.dtype)
        return v

    @property
    def batch(self) -> int:
        """How many independent environments: the carried state's batch extent."""
        return self.body.value(self.carried[0][0]).shape[self.batch_axis]

    def __str__(self) -> str:
        return format_repeat(self)

    def __repr__(self) -> str:
        return (f"Repeat({self.name!r}, x{self.trips}, carried={list(self.carried)}, "
                f"batch_axis={self.batch_axis})")

    # -- verifier ------------------------------------------------------------------
    def verify(self) -> "Repeat":
        """Check the repeat is well formed; raise :class:`GraphError` naming the fault:
        the body verifies, the trip count is an integer in [1, 2^31), carried pairs
        name a body input and a body output each once with the same shape and dtype,
        stacked inputs are body inputs not carried, at least one value is carried, and
        the batch axis exists in every carried and stacked value with one extent."""
        if self.__dict__.get("_verified"):
            return self
        where = f"repeat {self.name!r}"
        if not isinstance(self.body, Graph):
            raise GraphError(f"{where}: the body must be a Graph, got "
                             f"{type(self.body).__name__}")
        self.body.verify()
        if isinstance(self.trips, bool) or not isinstance(self.trips, int) or \
                not 1 <= self.trips <= MAX_TRIPS:
            raise GraphError(f"{where}: the trip count must be an integer in [1, "
                             f"{MAX_TRIPS}], got {self.trips!r:.40}; a loop whose count "
                             "is known only at run time cannot be a repeat")
        if not self.carried:
            raise GraphError(f"{where}: nothing is carried from step to step; name the "
                             "state as {body input: body output} pairs")
        ins, outs = set(self.body.inputs), set(self.body.outputs)
        for pair in self.carried:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise GraphError(f"{where}: a carried pair is (body input, body output), "
                                 f"got {pair!r:.60}")
            i, o = pair
            if i not in ins:
                raise GraphError(f"{where}: carried {i!r} is not a body input; the body "
                                 f"takes {', '.join(self.body.inputs)[:200]}")
            if o not in outs:
                raise GraphError(f"{where}: carried {o!r} is not a body output; the body "
                                 f"returns {', '.join(self.body.outputs)[:200]}")
            vi, vo = self.body.value(i), self.body.value(o)
            if (vi.shape, vi.dtype) != (vo.shape, vo.dtype):
                raise GraphError(f"{where}: state {i!r} is {vi.dtype.value}{list(vi.shape)} "
                                 f"but the step returns {o!r} as "
                                 f"{vo.dtype.value}{list(vo.shape)}; a carried value keeps "
                                 "its shape and dtype from step to step")
        for role, names in (("input", self.carried_inputs), ("output", self.carried_outputs)):
            if len(set(names)) != len(names):
                raise GraphError(f"{where}: a body {role} is carried twice in "
                                 f"{list(self.carried)}")
        for s in self.stacked_inputs:
            if s not in ins or s in self.carried_inputs:
                raise GraphError(f"{where}: stacked input {s!r} must be a body input that "
                                 "is not carried")
        if len(set(self.stacked_inputs)) != len(self.stacked_inputs):
            raise GraphError(f"{where}: a stacked input is listed twice")
        self._verify_counters(where, ins)
        if isinstance(self.batch_axis, bool) or not isinstance(self.batch_axis, int):
            raise GraphError(f"{where}: batch_axis must be an integer, got "
                             f"{self.batch_axis!r:.40}")
        extents = {}
        for n in (*self.carried_inputs, *self.stacked_inputs, *self.stacked_outputs):
            shape = self.body.value(n).shape
            if not 0 <= self.batch_axis < len(shape):
                raise GraphError(f"{where}: batch axis {self.batch_axis} does not exist in "
                                 f"{n!r} of shape {list(shape)}; every carried and stacked "
                                 "value holds the environments along that axis")
            extents[n] = shape[self.batch_axis]
        if len(set(extents.values())) != 1:
            raise GraphError(f"{where}: the batch axis has different extents "
                             f"{dict(list(extents.items())[:6])}; every carried and "
                             "stacked value must hold the same environments")
        self.__dict__["_verified"] = True
        return self

    def _verify_counters(self, where: str, ins: set) -> None:
        state = self.body.value(self.carried[0][0]).shape
        for role, c, shape in (("step_input", self.step_input, ()),
                               ("index_input", self.index_input, state)):
            if c is None:
                continue
            if not isinstance(c, str) or c not in ins:
                raise GraphError(f"{where}: {role} {c!r:.40} is not a body input; the body "
                                 f"takes {', '.join(self.body.inputs)[:200]}")
            if c in self.carried_inputs or c in self.stacked_inputs:
                raise GraphError(f"{where}: {role} {c!r} is also carried or stacked; the "
                                 "repeat supplies a counter itself")
            v = self.body.value(c)
            if v.dtype.kind != "i" or v.shape != shape:
                raise GraphError(f"{where}: {role} {c!r} is {v.dtype.value}{list(v.shape)}; "
                                 f"it must be an integer of shape {list(shape)} "
                                 + ("(the step index, a scalar)" if role == "step_input"
                                    else "(the carried state's: each element's index)"))
        if self.step_input is not None and self.step_input == self.index_input:
            raise GraphError(f"{where}: step_input and index_input name one input")

    def counter_values(self, t: int) -> dict[str, np.ndarray]:
        """The counters' values at step t (the reference's; the kernels compute them)."""
        out = {}
        if self.step_input is not None:
            out[self.step_input] = np.array(t, self.body.value(self.step_input).dtype.np)
        if self.index_input is not None:
            v = self.body.value(self.index_input)
            out[self.index_input] = np.arange(v.numel).astype(v.dtype.np).reshape(v.shape)
        return out

    # -- the NumPy reference -------------------------------------------------------
    def reference(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the body step by step with each op's NumPy reference (the ground truth
        every compiled form is compared with)."""
        args = check_repeat_inputs(self, inputs)
        state = {i: args[i] for i in self.carried_inputs}
        fixed = {i: args[i] for i in self.invariant_inputs}
        stacked = {o: np.empty((self.trips, *self.body.value(o).shape),
                               self.body.value(o).dtype.np) for o in self.stacked_outputs}
        for t in range(self.trips):
            step = {**state, **fixed, **{s: args[s][t] for s in self.stacked_inputs},
                    **self.counter_values(t)}
            res = _run_body(self.body, step)
            for i, o in self.carried:
                state[i] = res[o]
            for o in self.stacked_outputs:
                stacked[o][t] = res[o]
        return {**{o: state[i] for i, o in self.carried}, **stacked}


def _run_body(g: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One step, op by op with each op's NumPy reference (as runtime/reference.py runs
    a graph; written out here, so that the IR imports nothing above the ops)."""
    env = {**{c: g.constants[c] for c in g.constants}, **inputs}
    for n in g.nodes:
        outs = evaluate_node(n, [env[i] for i in n.inputs], [g.value(o) for o in n.outputs])
        env.update(zip(n.outputs, outs))
    return {o: env[o] for o in g.outputs}


def check_repeat_inputs(r: Repeat, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The repeat's inputs as contiguous arrays of their declared shapes and dtypes,
    or one GraphError naming the first that is missing or wrong."""
    if not isinstance(inputs, Mapping):
        raise GraphError(f"inputs must be a dict of input name -> array, got "
                         f"{type(inputs).__name__}")
    out = {}
    for name in r.inputs:
        v = r.value(name)
        if name not in inputs:
            raise GraphError(f"repeat {r.name!r}: missing input {name!r} "
                             f"({v.dtype.value}{list(v.shape)}); it takes "
                             + ", ".join(r.inputs)[:200])
        a = np.asarray(inputs[name])
        if a.shape != v.shape or a.dtype != v.dtype.np:
            raise GraphError(f"repeat {r.name!r}: input {name!r} is {a.dtype}{list(a.shape)}"
                             f", expected {v.dtype.value}{list(v.shape)}"
                             + (" (stacked: one slice per step first)"
                                if name in r.stacked_inputs else ""))
        out[name] = np.ascontiguousarray(a)
    return out


def repeat(step: Graph, n: int, state: Mapping[str, str] | Sequence[tuple[str, str]],
           *, stacked: Sequence[str] = (), batch_axis: int = 0,
           name: str | None = None, step_input: str | None = None,
           index_input: str | None = None) -> Repeat:
    """``step`` run ``n`` times: ``state`` maps each carried body input to the body
    output that replaces it; ``stacked`` names the body inputs read one slice per step;
    every other body output is stacked per step; ``step_input`` and ``index_input``
    name the body inputs the repeat fills with the step index and each element's flat
    index (the counters of a random op). Verified before it is returned."""
    if not isinstance(step, Graph):
        raise GraphError(f"repeat's step must be a Graph (GraphBuilder(...).build()), got "
                         f"{type(step).__name__}")
    items = list(state.items()) if isinstance(state, Mapping) else \
        list(state) if isinstance(state, (list, tuple)) else None
    if items is None or not all(isinstance(p, (tuple, list)) and len(p) == 2 and
                                all(isinstance(x, str) for x in p) for p in items):
        raise GraphError("repeat's state maps each carried body input to the body output "
                         "that replaces it: {input: output} or [(input, output), ...] of "
                         f"names, got {type(state).__name__} {str(state)[:60]!r}")
    if not isinstance(stacked, (list, tuple)) or not all(isinstance(x, str) for x in stacked):
        raise GraphError("repeat's stacked is a list of body input names, got "
                         f"{type(stacked).__name__} {str(stacked)[:60]!r}")
    if name is not None and not isinstance(name, str):
        raise GraphError(f"repeat's name is a string, got {type(name).__name__}")
    if isinstance(n, np.integer):
        n = int(n)
    return Repeat(name or step.name, step, n, tuple((i, o) for i, o in items),
                  tuple(stacked), batch_axis, step_input, index_input).verify()


# -- printer ----------------------------------------------------------------------------
def format_repeat(r: Repeat) -> str:
    """The repeat as text: a header with its trip count and roles, the body indented."""
    t = lambda n: f"{r.value(n).dtype.value}{list(r.value(n).shape)}"
    lines = [f"repeat {r.name} x{r.trips} (batch axis {r.batch_axis}) {{",
             "  carry " + ", ".join(f"{i} -> {o}: {t(i)}" for i, o in r.carried)]
    if r.stacked_inputs:
        lines.append("  stacked in " + ", ".join(f"{s}: {t(s)}" for s in r.stacked_inputs))
    if r.stacked_outputs:
        lines.append("  stacked out " + ", ".join(f"{s}: {t(s)}" for s in r.stacked_outputs))
    if r.invariant_inputs:
        lines.append("  invariant " + ", ".join(f"{s}: {t(s)}" for s in r.invariant_inputs))
    if r.counter_inputs:
        lines.append("  counters " + ", ".join(
            [f"step index -> {r.step_input}"] * (r.step_input is not None)
            + [f"element index -> {r.index_input}"] * (r.index_input is not None)))
    lines += ["  " + line for line in format_graph(r.body).splitlines()]
    lines.append("}")
    return "\n".join(lines)


# -- JSON -------------------------------------------------------------------------------
def repeat_to_json(r: Repeat) -> dict:
    """The repeat as a JSON-compatible dict: its roles and its body's graph JSON."""
    from .serialize import to_json
    return {"format": FORMAT, "version": VERSION, "name": r.name, "trips": r.trips,
            "carried": [[i, o] for i, o in r.carried],
            "stacked_inputs": list(r.stacked_inputs), "batch_axis": r.batch_axis,
            **{k: getattr(r, k) for k in ("step_input", "index_input")
               if getattr(r, k) is not None},
            "body": to_json(r.body)}


# repeats held in repeat nodes of a body (op repeat) nest in JSON: bounded, so a
# hostile file cannot recurse the reader into a RecursionError
MAX_NESTING = 4
# how deep the reader is in this thread (or task): the graph reader between two levels
# knows nothing of repeats, so the depth rides in a context variable, not an argument;
# (a module global would be shared by two threads reading two files)
_nesting: ContextVar[int] = ContextVar("wb_repeat_nesting", default=0)


def repeat_from_json(d: Any) -> Repeat:
    """Build and verify a repeat from its JSON dict; GraphError names what is wrong."""
    depth = _nesting.get()
    if depth >= MAX_NESTING:
        raise GraphError(f"repeat JSON: repeats nested more than {MAX_NESTING} deep (a "
                         "repeat node in a repeat's body...); flatten the file")
    token = _nesting.set(depth + 1)
    try:
        return _repeat_from_json(d)
    finally:
        _nesting.reset(token)


def _repeat_from_json(d: Any) -> Repeat:
    from .serialize import check_envelope, from_json
    check_envelope(d, FORMAT, VERSION, "workbench repeat")
    for key, kind in (("name", str), ("trips", int), ("carried", list), ("body", dict)):
        if not isinstance(d.get(key), kind) or isinstance(d.get(key), bool):
            raise GraphError(f"repeat JSON: {key!r} must be a {kind.__name__}, got "
                             f"{type(d.get(key)).__name__}")
    carried = d["carried"]
    if not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
               for p in carried):
        raise GraphError("repeat JSON: 'carried' is a list of [body input, body output] "
                         "pairs of names")
    stacked = d.get("stacked_inputs", [])
    if not isinstance(stacked, list) or not all(isinstance(s, str) for s in stacked):
        raise GraphError("repeat JSON: 'stacked_inputs' is a list of body input names")
    counters = {k: d.get(k) for k in ("step_input", "index_input")}
    for k, c in counters.items():
        if c is not None and not isinstance(c, str):
            raise GraphError(f"repeat JSON: {k!r} is a body input name, got "
                             f"{type(c).__name__}")
    return Repeat(d["name"], from_json(d["body"]), d["trips"],
                  tuple((i, o) for i, o in carried), tuple(stacked),
                  d.get("batch_axis", 0), **counters).verify()


def save_repeat(r: Repeat, path) -> None:
    import json
    from pathlib import Path
    Path(path).write_text(json.dumps(repeat_to_json(r), indent=1))


def load_repeat(path) -> Repeat:
    """Read and verify a repeat file (the graph loader's checks of the file apply)."""
    import json
    from pathlib import Path
    try:
        d = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise GraphError(f"cannot read repeat file {str(path)[:120]!r} ({e}); check the "
                         "path and that it is JSON") from None
    return repeat_from_json(d)


__all__ = ["Repeat", "check_repeat_inputs", "format_repeat", "load_repeat", "repeat",
           "repeat_from_json", "repeat_to_json", "save_repeat"]


# a graph's JSON holds a repeat node's Repeat as the repeat's own JSON (ir/nested.py)
nested.register(FORMAT, Repeat, repeat_to_json, repeat_from_json)
