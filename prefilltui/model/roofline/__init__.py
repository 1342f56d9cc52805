"""What the hardware could do for this model: prefill FLOPs, the roofline, MFU.

``flops`` (FLOPs from the model's shape, term by term), ``arithmetic`` (arithmetic
intensity, ridge point, expected time, MFU, the roofline verdict), ``model_catalog``
(``ModelShape`` from config.json), ``gpu_catalog`` (``Hardware``: datasheet peaks).
Every constant's source is in its module.  Pure: no I/O.

The rest of prefilltui imports this package, never its modules (an import-linter
contract); its modules import each other directly.
"""

from __future__ import annotations

from prefilltui.model.roofline.arithmetic import (
    HEALTHY_MFU, LOW_MFU, MFU_LABEL, MatmulEstimate, PrefillEstimate, ServerFlopsCheck,
    achieved_flops, estimate, exact_estimate, mfu, mfu_with_attention, server_flops_check, verdict,
)
from prefilltui.model.roofline.flops import (
    MFU_ATTENTION, Shape, count, linear_coefficient, linear_flops_per_token, marginal_flops,
    polynomial, quadratic_coefficient, total,
)
from prefilltui.model.roofline.gpu_catalog import Hardware, lookup_gpu
from prefilltui.model.roofline.model_catalog import (
    ModelShape, known_names, lookup_model, model_from_config,
)

__all__ = [
    "HEALTHY_MFU", "Hardware", "LOW_MFU", "MFU_ATTENTION", "MFU_LABEL", "MatmulEstimate",
    "ModelShape", "PrefillEstimate", "ServerFlopsCheck", "Shape", "achieved_flops", "count",
    "estimate", "exact_estimate", "known_names", "linear_coefficient", "linear_flops_per_token",
    "lookup_gpu", "lookup_model", "marginal_flops", "mfu", "mfu_with_attention",
    "model_from_config", "polynomial", "quadratic_coefficient", "server_flops_check", "total",
    "verdict",
]
