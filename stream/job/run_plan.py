"""The VRAM plan of one run, applied to its configuration before the models load.

A run that puts its models on a GPU (native TensorRT, or ONNX Runtime with the CUDA or
TensorRT provider first) gets a plan from the card's free and total memory
(stream.job.vram_plan): the precision, the detector, the batch, the TensorRT workspace
and whether the enhancer stays on. The plan's choices are written into the run's config,
its one line is the first note the run prints, and a plan that cannot fit even at its
smallest ends the run before anything loads, in one line. A CPU run has no plan; a
`--max-vram` given to one says, in one note, that it changes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engines.backends.base import RuntimeOptions
from engines.backends.ort import runs_on_cuda
from engines.catalog import locate
from stream.config import Config
from stream.errors import StreamError
from stream.job.vram_plan import SMALLER_DETECTOR, DeviceMemory, PlanRequest, VramPlan, device_memory, plan_vram


class PlanDoesNotFit(StreamError):
    """Even the smallest set of models does not fit the card (or the --max-vram cap)."""


@dataclass
class RunPlan:
    """The plan (None on the CPU) and the notes the run prints about it."""

    plan: VramPlan | None = None
    notes: list[str] = field(default_factory=list)


def gpu_runtime(options: RuntimeOptions) -> bool:
    """Whether models run by `options` live on a GPU."""
    if options.kind == "tensorrt":
        return True
    if options.kind not in ("onnxruntime", "auto"):  # auto is ONNX Runtime where it has a GPU
        return False  # a remote runtime's memory is its server's; OpenVINO's is no CUDA card's
    return runs_on_cuda(options.providers)


def neural_run(config: Config) -> bool:
    """Whether the run's engine is the neural set (`auto` with its files found)."""
    if config.engine == "neural":
        return True
    if config.engine != "auto":
        return False
    models = config.models
    return all(locate(getattr(models, role), models.dir) is not None for role in ("detector", "embedder", "swapper"))


def request_for(config: Config) -> PlanRequest:
    """What this run's config asks of the card."""
    models = config.models
    smaller = SMALLER_DETECTOR.get(models.detector)
    landmarker = models.landmarker if models.landmarker and locate(models.landmarker, models.dir) else None
    return PlanRequest(detector=models.detector, embedder=models.embedder, swapper=models.swapper,
                       landmarker=landmarker, enhancer=config.enhance.model if config.enhance.enabled else None,
                       max_faces=config.pipeline.max_faces,
                       fp16_allowed=config.runtime.kind == "tensorrt",  # ONNX Runtime runs the file's own precision
                       smaller_detector=smaller is not None and locate(smaller, models.dir) is not None)


def apply_plan(config: Config, plan: VramPlan) -> list[str]:
    """Write the plan's choices into `config`; notes for what the run gives up."""
    notes = []
    rt = config.runtime
    if rt.kind == "tensorrt":
        rt.trt_fp16 = rt.trt_fp16 or plan.precision == "fp16"
        rt.trt_max_batch = min(rt.trt_max_batch, plan.batch)
        rt.trt_workspace = min(rt.trt_workspace or plan.workspace, plan.workspace)
    if config.enhance.enabled and plan.enhancer is None:
        config.enhance.enabled = False
        notes.append(f"enhancer off: {config.enhance.model} does not fit the VRAM plan's budget")
    if plan.detector != config.models.detector:
        notes.append(f"detector {plan.detector} instead of {config.models.detector}, to fit the VRAM plan")
        config.models.detector = plan.detector
    return notes


def plan_run(config: Config, device: DeviceMemory | None = None) -> RunPlan:
    """The plan for this run, applied to `config`; PlanDoesNotFit when nothing fits.

    `device` None: the device the config names, read through cupy (no cupy, no device:
    a CPU run)."""
    cap = config.runtime.max_vram
    max_vram = int(cap) if cap is not None else None
    if not gpu_runtime(config.runtime) or not neural_run(config):
        why = "the models run on the CPU" if not gpu_runtime(config.runtime) else "the dlib engine runs on the CPU"
        if config.runtime.kind == "openvino":
            why = "OpenVINO has no VRAM plan"
        return RunPlan(notes=[f"--max-vram has no effect: {why}"] if max_vram is not None else [])
    device = device or device_memory(config.runtime.device_id)
    if device is None:  # the runtime itself says in one line that it finds no GPU
        return RunPlan()
    plan = plan_vram(device, request_for(config), max_vram)
    if not plan.fits:
        hint = " (lower the use elsewhere, raise --max-vram, or run on the CPU)" if max_vram is not None else \
            " (free memory on it, or run on the CPU)"
        raise PlanDoesNotFit(plan.line() + hint)
    return RunPlan(plan, [plan.line(), *apply_plan(config, plan)])
