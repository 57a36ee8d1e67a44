"""Print the contract variables a worker received as one JSON line."""

import json
import os

keys = sorted(
    k
    for k in os.environ
    if k.startswith(("WORKBENCH_", "PET_", "MASTER_", "TF_", "OMPI_"))
    or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "MY_SECRET_TOKEN", "LR")
)
print("ENV " + json.dumps({k: os.environ[k] for k in keys}), flush=True)
