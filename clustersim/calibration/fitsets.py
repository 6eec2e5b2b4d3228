"""The two fit sets and the shipped profile that takes each GPU from one of them.

- ``vidur`` (fit-v1): GEMMs, attention and NCCL on Vidur's 2023 A100/H100 tables and the
  LLMServingSim layer profiles, plain saturating rooflines (``clustersim.calibration.fit``).
- ``aiconfigurator`` (fit-v2): NVIDIA aiconfigurator's vLLM 0.24 / 0.14 kernel tables for the
  H100 SXM, H200, B200, B300, GB200, GB300, A100 SXM and L40S, each GPU on its own, with kernel
  floors, attention by keys per query and by context, vLLM's custom all-reduce beside NCCL; the
  layer-profile GPUs refitted in the same forms (``clustersim.calibration.aiconfigurator``).

``SHIPPED`` says which set each measured GPU ships with; GPUs that borrow a fit follow their
donor. Every measured GPU ships fit-v2, a choice made without the validation data: on the H100,
A100 and L40S its tables are the newer measurements of the engine clustersim models (vLLM 0.24 /
0.14 kernels), and on every GPU its forms fit each calibration table no worse than fit-v1's
form, most of them far better (the "What changed" table of docs/validation.md); the H200 and
the Blackwell GPUs have no table but aiconfigurator's (fit-v1 lends them the H100's). ``clustersim
validate`` scores both sets on the held-out data and says where fit-v1 would have done better
(``comparison.COMPARE_RULE``); those scores choose nothing, so that they stay held out.
``h100-sxm@vidur`` (any GPU) prices with fit-v1.
"""

from __future__ import annotations

import pandas as pd

from clustersim.calibration.aiconfigurator import FIT_ID as V2_ID
from clustersim.calibration.aiconfigurator import calibrate_v2
from clustersim.calibration.fit import FIT_ID as V1_ID
from clustersim.calibration.fit import TRANSFERS, Reader, calibrate

SETS = {"vidur": V1_ID, "aiconfigurator": V2_ID}
"""Fit set name -> its fit id."""
SHIPPED = {
    "a100-80gb-sxm": "aiconfigurator",
    "h100-sxm": "aiconfigurator",
    "l40s": "aiconfigurator",
    "h200": "aiconfigurator",
    "b200": "aiconfigurator",
    "b300": "aiconfigurator",
    "gb200": "aiconfigurator",
    "gb300": "aiconfigurator",
    "rtx4090": "aiconfigurator",
    "rtx-pro-6000-server": "aiconfigurator",
}
"""Measured GPU -> the fit set its shipped profile is (chosen without the validation data)."""
SHIPPED_FIT_ID = "+".join(dict.fromkeys(SETS[name] for name in SHIPPED.values()))
"""The shipped profile's fit id: its sets' ids (each GPU's ``calibration`` label says which)."""


def calibrate_sets(read: Reader = pd.read_csv) -> dict[str, dict[str, dict]]:
    """``{set name: {gpu_id: profile}}`` for both fit sets."""
    return {"vidur": calibrate(read), "aiconfigurator": calibrate_v2(read)}


def shipped_set(gpu_id: str) -> str:
    """The fit set ``gpu_id`` ships with: its own entry in ``SHIPPED``, else its donor's."""
    if gpu_id in SHIPPED:
        return SHIPPED[gpu_id]
    donor = TRANSFERS.get(gpu_id)
    if donor is None:
        raise KeyError(f"{gpu_id} is neither measured nor transferred")
    return shipped_set(donor)


def shipped_profiles(sets: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """The shipped profile: every GPU both sets cover, from the set ``shipped_set`` names, in
    the order the aiconfigurator set lists them. The FP8 GEMM fit is an aiconfigurator fit
    in both sets; a GPU on the ``vidur`` set would keep fit-v1's (the same table, no floor)."""
    return {gpu_id: sets[shipped_set(gpu_id)][gpu_id] for gpu_id in sets["aiconfigurator"]}
