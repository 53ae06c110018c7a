"""The sharded simulation step (``benchmarks/sharded_step.py``) on 8 simulated CPU devices:
a qtrace custom call with a per-element while_loop inside ``jax.shard_map`` with halo
exchange; the 8-device result and gradient equal the 1-device run, and the gradient equals
JAX's through a masked fori_loop."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_sharded_step_on_8_simulated_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "sharded_step.py"),
                          "--check-only", "--n-local", "512"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "devices: 8 x cpu" in out.stdout and "PASS" in out.stdout
