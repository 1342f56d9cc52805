"""prefilltui's FLOP count against PyTorch's own counter, live (torch is no dependency of
the app or of the test venv: the counter runs in another python, found below).

The python: ``$PREFILLTUI_TORCH_PYTHON``, else ``<cache>/prefilltui/torch-cpu/bin/python``
(``make torch-venv``), else the demo vLLM venv (``<cache>/prefilltui/vllm/*/venv``, which
holds torch and transformers); it must import torch and transformers.  Without one the
test is skipped with the install line, except in CI (``CI`` set), where it fails.
``$PREFILLTUI_FLOP_LENGTHS`` picks the prompt lengths (default 16,256,1024,4096).  The
same counts are recorded in tests/unit/fixtures/flop_counter.json, which the fast unit
tests (tests/unit/test_flops.py) hold the formula to everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prefilltui.demo.steps import cache_root
from prefilltui.model.roofline import flops
from tests.unit.test_flops import counter_shape

SCRIPT = Path(__file__).with_name("count_torch.py")
ENV = "PREFILLTUI_TORCH_PYTHON"
INSTALL = ("make torch-venv   # = python3 -m venv ~/.cache/prefilltui/torch-cpu && "
           "~/.cache/prefilltui/torch-cpu/bin/pip install 'torch==2.13.0+cpu' transformers "
           f"(or point {ENV} at a python that has torch and transformers)")


def torch_python() -> str | None:
    """The first candidate python that imports torch and transformers, else None."""
    root = cache_root()
    cands = [os.environ.get(ENV), str(root / "torch-cpu" / "bin" / "python")]
    cands += [str(p) for p in sorted((root / "vllm").glob("*/venv/bin/python"), reverse=True)]
    for c in cands:
        if not c or not Path(c).exists():
            continue
        try:
            ok = subprocess.run([c, "-c", "import torch, transformers"], capture_output=True,
                                timeout=180).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return c
    return None


@pytest.fixture(scope="module")
def torch_py() -> str:
    py = torch_python()
    if py is None:
        msg = f"no python with torch + transformers for the FLOP counter; install one: {INSTALL}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return py


@pytest.mark.timeout(900)  # a 4,096-token eager forward of the 8B slice: ~70 s here, more under load
@pytest.mark.parametrize("shape", ["smollm2-135m", "llama-3-8b-2layers"])
def test_count_is_within_1_percent_of_pytorchs_flop_counter(torch_py, shape):
    lengths = os.environ.get("PREFILLTUI_FLOP_LENGTHS", "16,256,1024,4096")
    p = subprocess.run([torch_py, str(SCRIPT), "--shapes", shape, "--lengths", lengths],
                       capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    counts = d["shapes"][shape]["counts"]
    assert sorted(int(n) for n in counts) == sorted(int(n) for n in lengths.split(","))
    m = counter_shape(shape)
    for n, c in counts.items():
        ours = flops.total(m, int(n), 0, "full")
        print(f"{shape} n={n}: ours/counter = {ours / c['total']:.6f} "
              f"(torch {d['torch']}, {c['seconds']} s)", file=sys.stderr)
        assert ours / c["total"] == pytest.approx(1.0, abs=0.01), (n, ours, c["total"])
