"""The example agent loop runs end to end against the test daemon."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SDK = Path(__file__).resolve().parents[1]


def test_agent_loop_example(daemon):
    env = dict(os.environ, LAYERFS_DAEMON=daemon["address"], PYTHONPATH=str(SDK))
    p = subprocess.run([sys.executable, str(SDK / "examples" / "agent_loop.py"), "example-loop"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "candidate 1:" in out and "candidate 2:" in out and "committed" in out
    assert "log main: fizzbuzz, candidate 2 <- " in out
    assert "log alternative: fizzbuzz, one expression <- fizzbuzz, candidate 2" in out
    assert "diff main..alternative: modified fizzbuzz.py" in out
