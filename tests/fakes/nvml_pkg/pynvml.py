"""The fake NVML importable as ``pynvml`` in subprocesses (agent, job supervisor).

Put this directory first on PYTHONPATH and set WORKBENCH_FAKE_NVML to a JSON scenario
file (format: tests/fakes/fake_nvml.py); every attribute is the FakeNvml built from it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any

WORKBENCH_FAKE = True

_path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_nvml.py")
_spec = importlib.util.spec_from_file_location("_workbench_fake_nvml", _path)
assert _spec and _spec.loader
_module = importlib.util.module_from_spec(_spec)
sys.modules["_workbench_fake_nvml"] = _module
_spec.loader.exec_module(_module)

with open(os.environ["WORKBENCH_FAKE_NVML"]) as _f:
    _fake = _module.FakeNvml(json.load(_f))


def __getattr__(name: str) -> Any:
    return getattr(_fake, name)
