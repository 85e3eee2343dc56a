"""Write the classic-control simulators as repeat samples (``sample_graphs/repeats/``).

Run from the repository root::

    python sample_graphs/make_repeat_samples.py            # writes sample_graphs/repeats/
    python sample_graphs/make_repeat_samples.py OUT_DIR

Each file is a repeat (``"format": "workbench.repeat"``, ``docs/repeat.md``): one step
of gymnasium's simulator over 4096 environments, 256 steps
(``workbench/testing/simulators.py``). Load one with
``workbench.ir.repeat.load_repeat(path)``.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from workbench.ir.repeat import save_repeat  # noqa: E402
from workbench.testing.simulators import SIMULATORS  # noqa: E402

ENVS, STEPS = 4096, 256


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, make in SIMULATORS.items():
        save_repeat(make(ENVS, STEPS), out / f"{name}.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "repeats")
