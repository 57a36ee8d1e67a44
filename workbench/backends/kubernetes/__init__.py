"""The Kubernetes backend: pure TrainSpec -> manifest functions (manifests.py) and the
one-watch-per-namespace status feed (watch.py). Only this package imports ``kubernetes``,
and only where it talks to a cluster: rendering manifests needs no client."""

from __future__ import annotations
