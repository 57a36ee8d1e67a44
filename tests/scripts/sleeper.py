"""Start a grandchild that ignores SIGTERM, then sleep: cancel must still end both."""

import os
import signal
import subprocess
import sys
import time

child = subprocess.Popen(
    [
        sys.executable,
        "-c",
        "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
    ]
)
print(f"rank {os.environ['WORKBENCH_RANK']} sleeping, grandchild {child.pid}", flush=True)
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(float(os.environ.get("SLEEP", "600")))
