"""The catalogue: deep-learning images and priced instance specs.

The packaged ``catalog.yaml`` is the default; a user file (WORKBENCH_CATALOG or the
``catalog_file`` setting) of the same shape adds or replaces entries by name.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError

FRAMEWORKS = ("pytorch", "tensorflow", "mpi", "plain")


@dataclass(frozen=True)
class Image:
    """A named deep-learning image with tags mapping to full image references."""

    name: str
    framework: str
    description: str
    default_tag: str
    tags: dict[str, str] = field(default_factory=dict)

    def ref(self, tag: str | None = None) -> str:
        """The full image reference for ``tag`` (the default tag when None)."""
        tag = tag or self.default_tag
        if tag not in self.tags:
            raise SpecError(
                "image",
                f"image {self.name!r} has no tag {tag!r}",
                f"known tags: {', '.join(sorted(self.tags))}",
            )
        return self.tags[tag]


@dataclass(frozen=True)
class InstanceSpec:
    """A priced machine shape: GPUs (possibly fractional), vCPUs and memory per worker."""

    name: str
    gpus: float
    cpu: int
    memory: str
    price_per_hour: float
    gpu_model: str | None = None
    gpu_memory: str | None = None
    shared: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form for JSON output (REST GET specs, `workbench specs -o json`)."""
        return {
            "name": self.name,
            # one name per quantity: a spec's GPUs are each worker's, as on a JobRecord
            "gpus_per_worker": self.gpus,
            "gpu_model": self.gpu_model,
            "gpu_memory": self.gpu_memory,
            "cpu": self.cpu,
            "memory": self.memory,
            "price_per_hour": self.price_per_hour,
            "shared": self.shared,
        }


@dataclass(frozen=True)
class Catalog:
    """Images and instance specs, looked up by name."""

    images: dict[str, Image]
    specs: dict[str, InstanceSpec]

    def resolve_image(self, value: str) -> tuple[str, Image | None]:
        """Map ``pytorch`` / ``pytorch:2.13`` / a full reference to (reference, Image|None).

        A value with a registry or repository path (it contains ``/``) passes through.
        """
        if "/" in value:
            return value, None
        name, _, tag = value.partition(":")
        image = self.images.get(name)
        if image is None:
            raise SpecError(
                "image",
                f"unknown image {value!r}",
                f"use one of {', '.join(sorted(self.images))} or a full reference like "
                "registry/repo:tag",
            )
        return image.ref(tag or None), image

    def spec(self, name: str) -> InstanceSpec:
        """The instance spec called ``name``."""
        try:
            return self.specs[name]
        except KeyError:
            raise SpecError(
                "spec",
                f"unknown instance spec {name!r}",
                f"use one of {', '.join(sorted(self.specs))} (see `workbench specs`)",
            ) from None

    def smallest_spec_for(self, gpus: float) -> InstanceSpec:
        """The cheapest spec that offers at least ``gpus`` GPUs per worker."""
        fits = [s for s in self.specs.values() if s.gpus >= gpus and (gpus > 0 or s.gpus == 0)]
        if not fits:
            most = max(s.gpus for s in self.specs.values())
            raise SpecError(
                "gpus", f"no instance spec offers {gpus:g} GPUs per worker", f"the most is {most:g}"
            )
        return min(fits, key=lambda s: (s.price_per_hour, s.gpus))


def _parse(data: dict[str, Any], source: str) -> tuple[dict[str, Image], dict[str, InstanceSpec]]:
    images: dict[str, Image] = {}
    specs: dict[str, InstanceSpec] = {}
    try:
        for name, d in (data.get("images") or {}).items():
            framework = d.get("framework", "plain")
            if framework not in FRAMEWORKS:
                raise SpecError(f"{source}: images.{name}.framework", f"unknown {framework!r}")
            tags = {str(k): str(v) for k, v in (d.get("tags") or {}).items()}
            images[name] = Image(
                name=name,
                framework=framework,
                description=str(d.get("description", "")),
                default_tag=str(d.get("default") or next(iter(tags), "")),
                tags=tags,
            )
        for name, d in (data.get("specs") or {}).items():
            specs[name] = InstanceSpec(
                name=name,
                gpus=float(d.get("gpus", 0)),
                cpu=int(d["cpu"]),
                memory=str(d["memory"]),
                price_per_hour=float(d["price_per_hour"]),
                gpu_model=d.get("gpu_model"),
                gpu_memory=d.get("gpu_memory"),
                shared=bool(d.get("shared", False)),
            )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, SpecError):
            raise
        raise SpecError(
            source, f"malformed catalogue entry: {e}", "see workbench/catalog.yaml"
        ) from None
    return images, specs


@functools.lru_cache(maxsize=8)
def _load_cached(user_file: str | None, mtime: float) -> Catalog:
    default = yaml.safe_load((Path(__file__).parent / "catalog.yaml").read_text())
    images, specs = _parse(default, "catalog.yaml")
    if user_file:
        try:
            data = yaml.safe_load(Path(user_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise SpecError("catalog_file", f"cannot read {user_file}: {e}") from None
        more_images, more_specs = _parse(data, user_file)
        images.update(more_images)
        specs.update(more_specs)
    return Catalog(images=images, specs=specs)


def load_catalog(user_file: Path | str | None = None) -> Catalog:
    """The packaged catalogue, extended by ``user_file`` when given."""
    if user_file:
        path = Path(user_file)
        if not path.is_file():
            raise SpecError("catalog_file", f"{path} does not exist", "fix WORKBENCH_CATALOG")
        return _load_cached(str(path), path.stat().st_mtime)
    return _load_cached(None, 0.0)
