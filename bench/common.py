"""Shared bits of the benchmarks: a results table and its JSON file."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    import torch
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d %H:%M")}


def report(name: str, rows: list[dict], columns: list[str]) -> Path:
    """Print `rows` as a table with `columns` and write them with machine facts to JSON."""
    widths = [max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns]
    print(" | ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(_fmt(r.get(c)).ljust(w) for c, w in zip(columns, widths)))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2))
    print(f"\nwrote {out}")
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"
    return "" if v is None else str(v)
