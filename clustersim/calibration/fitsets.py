"""The two fit sets and the shipped profile that takes each GPU from one of them.

- ``vidur`` (fit-v1): GEMMs, attention and NCCL on Vidur's 2023 A100/H100 tables and the
  LLMServingSim layer profiles, plain saturating rooflines (``clustersim.calibration.fit``).
- ``aiconfigurator`` (fit-v2): NVIDIA aiconfigurator's vLLM 0.24 / 0.14 kernel tables for the
  H100 SXM, A100 SXM and L40S with kernel floors, attention by keys per query and by context,
  vLLM's custom all-reduce beside NCCL; the layer-profile GPUs refitted in the same forms
  (``clustersim.calibration.aiconfigurator``).

``SHIPPED`` says which set each measured GPU ships with; GPUs that borrow a fit follow their
donor. The choice was made on the held-out validation scores that ``clustersim validate``
prints for both sets (docs/validation.md, "Which fit ships"), by ``comparison.SHIP_RULE``,
never by fitting anything on those data: the calibration reads no validation file (the choice
is data here, so that ``clustersim calibrate`` needs none).
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
    "a100-80gb-sxm": "vidur",
    "h100-sxm": "aiconfigurator",
    "l40s": "aiconfigurator",
    "rtx4090": "vidur",
    "rtx-pro-6000-server": "vidur",
}
"""Measured GPU -> the fit set its shipped profile is (docs/validation.md says why)."""


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
    in both sets; a GPU on the ``vidur`` set keeps fit-v1's (the same table, no floor)."""
    return {gpu_id: sets[shipped_set(gpu_id)][gpu_id] for gpu_id in sets["aiconfigurator"]}
