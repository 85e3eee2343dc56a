"""Write the distributed sample programs (workbench/distributed/samples.py) as JSON
into sample_graphs/distributed/ (or OUT_DIR)::

    python sample_graphs/make_distributed_samples.py [OUT_DIR]
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from workbench.distributed import save_json  # noqa: E402
from workbench.distributed.samples import SAMPLES  # noqa: E402


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for fname, (make, sizes) in SAMPLES.items():
        save_json(make(**sizes), out / fname)
        print(out / fname)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "distributed")
