"""The GPU and model catalogs: shipped YAML data, validated into frozen specs.

>>> load_gpu("h100-sxm").mem_bw_gb_per_s
3350.0
>>> load_model("llama-3.1-8b").kv_bytes_per_token()
131072

``load_model`` also takes a path to a HuggingFace ``config.json`` (or its folder).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from clustersim.catalog.hf_config import model_from_hf_config
from clustersim.catalog.specs import GpuSpec, LinkSpec, ModelSpec
from clustersim.errors import CatalogError

__all__ = [
    "GpuSpec",
    "LinkSpec",
    "ModelSpec",
    "gpu_ids",
    "load_gpu",
    "load_model",
    "model_ids",
]

_SpecT = TypeVar("_SpecT", GpuSpec, ModelSpec)
_GPUS_FILE = "gpus.yaml"
_MODELS_FILE = "models.yaml"


def gpu_ids() -> list[str]:
    """Catalog GPU ids, in file order."""
    return list(_gpus())


def model_ids() -> list[str]:
    """Catalog model ids, in file order."""
    return list(_models())


def load_gpu(gpu_id: str, *, path: str = "gpu") -> GpuSpec:
    """The catalog GPU ``gpu_id``; ``path`` names the field it came from, for the error."""
    gpus = _gpus()
    if gpu_id not in gpus:
        raise CatalogError(path, f"unknown GPU {gpu_id!r}; known: {', '.join(gpus)}")
    return gpus[gpu_id]


def load_model(model: str, *, path: str = "model") -> ModelSpec:
    """A catalog model id, or a path to a HuggingFace ``config.json`` (or a folder with one)."""
    models = _models()
    if model in models:
        return models[model]
    file = Path(model).expanduser()
    if file.exists():
        return model_from_hf_config(file)
    raise CatalogError(
        path,
        f"unknown model {model!r} (not a catalog id, and no such config.json); "
        f"known: {', '.join(models)}",
    )


@lru_cache(maxsize=1)
def _gpus() -> dict[str, GpuSpec]:
    entries = _read_table(_GPUS_FILE, "gpus")
    return {gpu_id: _validate(GpuSpec, _GPUS_FILE, gpu_id, e) for gpu_id, e in entries.items()}


@lru_cache(maxsize=1)
def _models() -> dict[str, ModelSpec]:
    entries = _read_table(_MODELS_FILE, "models")
    return {mid: _validate(ModelSpec, _MODELS_FILE, mid, e) for mid, e in entries.items()}


def _read_table(file_name: str, key: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(file_name).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(file_name, f"not valid YAML: {exc}") from exc
    table = data.get(key) if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise CatalogError(file_name, f"expected a {key!r} mapping of id -> entry")
    return table


def _validate(spec: type[_SpecT], file_name: str, entry_id: str, entry: Any) -> _SpecT:
    if not isinstance(entry, dict):
        raise CatalogError(f"{file_name}:{entry_id}", "an entry must be a mapping")
    try:
        return spec.model_validate({"id": entry_id, **entry})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise CatalogError(f"{file_name}:{entry_id}.{field}", first["msg"]) from exc
