"""Print LINES numbered lines tagged with this worker's rank, a little apart in time."""

import os
import time

rank = int(os.environ["WORKBENCH_RANK"])
for i in range(int(os.environ.get("LINES", "5"))):
    print(f"rank {rank} line {i}", flush=True)
    time.sleep(float(os.environ.get("GAP", "0.02")))
