"""Does one model replica fit in one unit's HBM?

Per parameter, mixed-precision training holds weights and gradients in the training
precision plus fp32 optimizer state: Adam's master weights, momentum and variance are
4 + 4 + 4 = 12 bytes, 16 bytes in all with bf16 (Rajbhandari et al., "ZeRO", 2020, sec. 3.1).
Activations are an allowance per GPU from the stack. Usable HBM is 90% of the unit's.
"""

from __future__ import annotations

from gpufleet.catalog import InstanceType
from gpufleet.findings import Finding, error, info
from gpufleet.plan.model import MemoryFit
from gpufleet.spec import ModelConfig

GIB = 2**30
USABLE_FRACTION = 0.9
PRECISION_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# fp32 optimizer state per parameter, without / with an fp32 master copy (mixed precision)
OPTIMIZER_BYTES = {"adam": 8.0, "adamw": 8.0, "sgd": 4.0, "adafactor": 0.5}
MASTER_WEIGHT_BYTES = 4.0


def memory_fit(model: ModelConfig, instance: InstanceType, unit_gpus: int) -> tuple[MemoryFit, list[Finding]]:
    params = model.parameters_billions * 1e9
    bpp = PRECISION_BYTES[model.precision]
    grad_bpp = max(bpp, 2.0)  # fp8 training keeps bf16 gradients
    mixed = model.precision != "fp32"
    opt_bpp = OPTIMIZER_BYTES[model.optimizer] + (MASTER_WEIGHT_BYTES if mixed else 0.0)
    weights = params * bpp / GIB
    grads = params * grad_bpp / GIB
    opt = params * opt_bpp / GIB
    acts = model.activation_gib_per_gpu * unit_gpus
    total = weights + grads + opt + acts
    hbm = float(instance.hbm_gib_per_gpu * unit_gpus)
    usable = hbm * USABLE_FRACTION
    fit = MemoryFit(parameters_billions=model.parameters_billions, bytes_per_parameter=bpp + grad_bpp + opt_bpp,
                    weights_gib=round(weights, 1), gradients_gib=round(grads, 1), optimizer_gib=round(opt, 1),
                    activations_gib=round(acts, 1), total_gib=round(total, 1), unit_hbm_gib=hbm,
                    usable_gib=round(usable, 1), fits=total <= usable)
    if fit.fits:
        return fit, [info("MODEL_FITS_UNIT", "gpufleet:model",
                          f"{total:.0f} GiB of {usable:.0f} GiB usable in a {unit_gpus}-GPU unit")]
    return fit, [error("MODEL_DOES_NOT_FIT_UNIT", "gpufleet:model.parametersBillions",
                       f"{model.parameters_billions}B parameters in {model.precision} with {model.optimizer} need "
                       f"{total:.0f} GiB (weights {weights:.0f}, gradients {grads:.0f}, optimizer {opt:.0f}, "
                       f"activations {acts:.0f}) but a {unit_gpus}-GPU unit has {usable:.0f} GiB usable "
                       f"({USABLE_FRACTION:.0%} of {hbm:.0f} GiB); use larger units or shard across units")]
