"""The GPU and model catalogs: shipped YAML data, validated into frozen specs.

>>> load_gpu("h100-sxm").mem_bw_gb_per_s
3350.0
>>> load_model("llama-3.1-8b").kv_bytes_per_token()
131072

``load_model`` also takes a path to a HuggingFace ``config.json`` (or its folder).

``load_gpu`` returns the datasheet entry of ``gpus.yaml`` with a calibrated profile merged in:
by default ``calibrated.yaml`` (written by ``clustersim calibrate``; efficiencies, overheads and
all-reduce cost fitted on kernel profiles), ``profile="default"`` for the uncalibrated guesses,
``"vidur"`` or ``"aiconfigurator"`` for one fit set on every GPU (the shipped profile picks one
per GPU), or a path to a profile YAML file of the same format (a user's few-shot fit). A GPU id may
carry its profile after an ``@`` (``rtx-pro-6000@mine.yaml``, ``h100-sxm@default``), so a
scenario's ``gpu:`` field can pick one.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from clustersim.catalog.hf_config import model_from_hf_config
from clustersim.catalog.quantization import quantization_from_hf
from clustersim.catalog.specs import GpuSpec, LinkSpec, ModelSpec
from clustersim.errors import CatalogError, ConfigError, InputError
from clustersim.inputs import load_yaml, parse_shipped_yaml
from clustersim.validation import validation_lines

__all__ = [
    "GpuSpec",
    "apply_profile",
    "LinkSpec",
    "ModelSpec",
    "gpu_ids",
    "load_gpu",
    "load_model",
    "model_ids",
    "profile_entry",
]

_SpecT = TypeVar("_SpecT", GpuSpec, ModelSpec)
_GPUS_FILE = "gpus.yaml"
_MODELS_FILE = "models.yaml"
_PRICES_FILE = "prices.yaml"
CALIBRATED_FILE = "calibrated.yaml"
FIT_SET_FILES = {"vidur": "calibrated_vidur.yaml",
                 "aiconfigurator": "calibrated_aiconfigurator.yaml"}
"""Named profiles beside the shipped one: every GPU on one fit set (``clustersim calibrate``
writes them; ``validate`` scores both). The shipped ``calibrated.yaml`` takes each GPU from one
of them."""
PROFILE_FIELDS = (
    "compute_efficiency",
    "compute_half_tokens",
    "gemm_floor_s",
    "attention_efficiency",
    "attention_half_keys",
    "attention_floor_s",
    "decode_attention_memory_efficiency",
    "decode_attention_half_tokens",
    "memory_efficiency",
    "small_kernel_floor_s",
    "small_kernel_cta_s_per_byte",
    "small_kernel_memory_efficiency",
    "per_step_overhead_s",
    "per_layer_overhead_s",
    "per_request_overhead_s",
    "allreduce_latency_s",
    "custom_allreduce_latency_s",
    "custom_allreduce_link_efficiency",
    "allreduce_curves",
    "allgather_latency_s",
    "allgather_link_efficiency",
    "reduce_scatter_latency_s",
    "reduce_scatter_link_efficiency",
    "non_torch_memory_bytes",
    "tp_non_torch_memory_bytes",
    "fp8_gemm",
    "fp4_gemm",
    "moe_gemm",
    "moe_kernels",
    "deepep_calls",
    "weight_only_compute_ratio",
    "calibration",
)
"""GpuSpec fields a profile may set; ``link_efficiency`` sets ``link.efficiency``."""


def gpu_ids() -> list[str]:
    """Catalog GPU ids, in file order."""
    return list(_gpus())


def model_ids() -> list[str]:
    """Catalog model ids, in file order."""
    return list(_models())


def load_gpu(gpu_id: str, *, path: str = "gpu", profile: str = "calibrated") -> GpuSpec:
    """The catalog GPU ``gpu_id`` with ``profile`` merged in (see the module docstring).

    ``path`` names the field ``gpu_id`` came from, for the error. A GPU the profile does not
    cover keeps its ``gpus.yaml`` values (``calibration: default``). ``ID@PROFILE`` overrides
    ``profile``.
    """
    gpu_id, at, suffix = gpu_id.partition("@")
    if at and not suffix:
        raise CatalogError(path, f"nothing after '@' in {gpu_id + at!r}: name a profile "
                           "('calibrated', 'default', 'vidur', 'aiconfigurator' or a profile YAML "
                           "file) or drop the '@'")
    return _load_gpu(gpu_id, path, suffix if at else profile)


@lru_cache(maxsize=256)
def _load_gpu(gpu_id: str, path: str, profile: str) -> GpuSpec:
    gpus = _gpus()
    if gpu_id not in gpus:
        raise CatalogError(path, f"unknown GPU {gpu_id!r}; known: {', '.join(gpus)}")
    if profile == "default":
        return gpus[gpu_id]
    entry = load_profiles(profile).get(gpu_id)
    return gpus[gpu_id] if entry is None else apply_profile(gpus[gpu_id], entry, where=profile)


def profile_entry(gpu: GpuSpec) -> dict[str, Any]:
    """The profile entry that reproduces ``gpu``'s priced fields (``apply_profile``'s inverse
    over the catalog entry), link efficiency included."""
    # nested fits (FP8 GEMMs, all-reduce curves) as plain mappings and lists, the form a
    # profile file holds
    dumped = gpu.model_dump(mode="json")
    return {**{k: dumped[k] for k in PROFILE_FIELDS}, "link_efficiency": gpu.link.efficiency}


def apply_profile(gpu: GpuSpec, entry: dict[str, Any], *, where: str = "profile") -> GpuSpec:
    """``gpu`` with a profile entry's fields replaced (unknown keys other than provenance are
    errors); the result is validated like a catalog entry. An entry without a ``calibration``
    label is named after its base and its file (``default+mine.yaml``)."""
    unknown = set(entry) - set(PROFILE_FIELDS) - {"link_efficiency", "provenance"}
    if unknown:
        raise ConfigError(f"{where}:{gpu.id}",
                          f"unknown profile fields: {sorted(map(str, unknown))}")
    data = gpu.model_dump()
    data.update({k: v for k, v in entry.items() if k in PROFILE_FIELDS})
    if "calibration" not in entry:
        data["calibration"] = f"{gpu.calibration}+{Path(where).name}"
    if "link_efficiency" in entry:
        data["link"] = {**data["link"], "efficiency": entry["link_efficiency"]}
    return _validate(GpuSpec, where, gpu.id, data)


@lru_cache(maxsize=16)
def load_profiles(profile: str = "calibrated") -> dict[str, dict[str, Any]]:
    """``{gpu_id: entry}`` of a profile: ``calibrated`` (shipped), a fit set's name
    (``FIT_SET_FILES``: ``vidur``, ``aiconfigurator``) or a YAML file's path."""
    if profile == "calibrated" or profile in FIT_SET_FILES:
        name = FIT_SET_FILES.get(profile, CALIBRATED_FILE)
        file = resources.files(__package__).joinpath(name)
        if not file.is_file():  # before the first `clustersim calibrate`
            return {}
        try:
            data = parse_shipped_yaml(file.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise CatalogError(name, f"not valid YAML: {exc}") from exc
    else:
        path = Path(profile).expanduser()
        if not path.exists():
            raise InputError(profile, "no such profile file; give 'calibrated', 'default', "
                             "'vidur', 'aiconfigurator' or a profile YAML written by "
                             "`clustersim calibrate`")
        data, name = load_yaml(path, "profile", where=profile), profile
    table = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise InputError(name, "expected a 'profiles' mapping of GPU id -> fields")
    return table


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
def default_prices() -> dict[str, tuple[float, str]]:
    """GPU id -> (USD per GPU-hour, source): the snapshots in ``prices.yaml``, for plans whose
    scenario sets no price (prices move; they are user input with a named default)."""
    table = _read_table(_PRICES_FILE, "prices")
    prices = {}
    for gpu_id, entry in table.items():
        if gpu_id not in _gpus():
            raise CatalogError(f"{_PRICES_FILE}:{gpu_id}", "not a catalog GPU id")
        value = entry.get("usd_per_gpu_hour") if isinstance(entry, dict) else None
        if not isinstance(value, int | float) or value < 0 or not entry.get("source"):
            raise CatalogError(f"{_PRICES_FILE}:{gpu_id}",
                               "needs usd_per_gpu_hour (a number >= 0) and a source")
        prices[gpu_id] = (float(value), str(entry["source"]))
    return prices


@lru_cache(maxsize=1)
def host_memory_price() -> tuple[float, str]:
    """(USD per GiB-hour of host memory, source): ``prices.yaml``'s ``host_memory``, what a
    plan prices a CPU KV tier at when the scenario sets no price."""
    text = resources.files(__package__).joinpath(_PRICES_FILE).read_text(encoding="utf-8")
    entry = parse_shipped_yaml(text).get("host_memory")
    value = entry.get("usd_per_gib_hour") if isinstance(entry, dict) else None
    if not isinstance(value, int | float) or value < 0 or not entry.get("source"):
        raise CatalogError(f"{_PRICES_FILE}:host_memory",
                           "needs usd_per_gib_hour (a number >= 0) and a source")
    return float(value), str(entry["source"])


@lru_cache(maxsize=1)
def _gpus() -> dict[str, GpuSpec]:
    entries = _read_table(_GPUS_FILE, "gpus")
    return {gpu_id: _validate(GpuSpec, _GPUS_FILE, gpu_id, e) for gpu_id, e in entries.items()}


@lru_cache(maxsize=1)
def _models() -> dict[str, ModelSpec]:
    entries = _read_table(_MODELS_FILE, "models")
    return {mid: _validate(ModelSpec, _MODELS_FILE, mid, _with_quantization(mid, e))
            for mid, e in entries.items()}


def _with_quantization(model_id: str, entry: Any) -> Any:
    """A catalog entry's ``quantization_config`` (copied from the checkpoint's config.json)
    read as a HuggingFace config's is."""
    if not isinstance(entry, dict) or "quantization_config" not in entry:
        return entry
    entry = dict(entry)
    raw = {"quantization_config": entry.pop("quantization_config")}
    spec = quantization_from_hf(raw, f"{_MODELS_FILE}:{model_id}")
    return {**entry, "quantization": None if spec is None else spec.model_dump()}


def _read_table(file_name: str, key: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(file_name).read_text(encoding="utf-8")
    try:
        data = parse_shipped_yaml(text)
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
        return spec.model_validate({**entry, "id": entry_id})
    except ValidationError as exc:
        first = validation_lines(spec, exc, entry, f"{file_name}:{entry_id}")[0]
        path, _, message = first.partition(": ")
        raise CatalogError(path, message) from None
