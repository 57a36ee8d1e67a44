"""A rank that starts a grandchild which leaves its process group and session (setsid),
then waits: rank 0 forever, the others until GATE exists (then they exit 0)."""

import os
import subprocess
import sys
import time
from pathlib import Path

child = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
)
rank = int(os.environ["WORKBENCH_RANK"])
print(f"rank {rank} up, escaped grandchild {child.pid}", flush=True)
gate = Path(os.environ["GATE"])
while rank == 0 or not gate.exists():
    time.sleep(0.05)
