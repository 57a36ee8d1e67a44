"""Rank FAIL_RANK exits with FAIL_CODE (on attempts up to FAIL_UNTIL); others sleep or finish."""

import os
import sys
import time

rank = int(os.environ["WORKBENCH_RANK"])
attempt = int(os.environ["WORKBENCH_ATTEMPT"])
print(f"rank {rank} attempt {attempt} started", flush=True)
if rank == int(os.environ.get("FAIL_RANK", "1")) and attempt <= int(
    os.environ.get("FAIL_UNTIL", "99")
):
    time.sleep(0.5)
    print(f"rank {rank} failing on purpose", flush=True)
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
time.sleep(float(os.environ.get("OTHER_SLEEP", "0.5")))
print(f"rank {rank} finished", flush=True)
