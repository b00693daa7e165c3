"""The VRAM plan: what a run puts on the GPU, chosen from the card's free and total memory.

The GPU runs inference only (the design), so device memory holds the CUDA context, each
model's weights, its activations for the largest batch it is given, and the TensorRT
builder's workspace pool. The plan starts from the best set (fp32, the large detector,
the enhancer when asked for, batches of 8, a 1 GiB workspace) and gives things up, cheapest
loss first, until the estimate fits the budget: the smaller of 85% of the card, what is
free now, and `--max-vram`. A plan that cannot fit even at its smallest says so in one line.

The figures are estimates per model from the standard files (weights: the file sizes;
activations: measured orders of magnitude per batch item), rounded up: a plan is a
budget, not an allocation, so it errs on the side of fitting.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engines.backends.base import parse_size  # noqa: F401  (sizes as users write them: 1.5G, 800M)

MiB = 1024 * 1024
GiB = 1024 * MiB

CARD_SHARE = 0.85  # the most of a card a run plans to use
CONTEXT_BYTES = 400 * MiB  # the CUDA context, cuBLAS/cuDNN handles and the allocator's slack
FREE_MARGIN = 128 * MiB  # left free even when the card is otherwise idle

# Weights (fp32 bytes; fp16 halves them) and activations per batch item (fp32 bytes).
WEIGHTS = {
    "scrfd_10g": 17 * MiB, "scrfd_2.5g": 4 * MiB, "arcface_w600k_r50": 175 * MiB,
    "inswapper_128": 555 * MiB, "inswapper_128_fp16": 555 * MiB, "2dfan4": 100 * MiB,
    "gfpgan_1.4": 350 * MiB,
}
ACTIVATIONS = {
    "scrfd_10g": 180 * MiB, "scrfd_2.5g": 90 * MiB, "arcface_w600k_r50": 24 * MiB,
    "inswapper_128": 48 * MiB, "inswapper_128_fp16": 48 * MiB, "2dfan4": 40 * MiB,
    "gfpgan_1.4": 640 * MiB,
}
BATCHED = ("arcface_w600k_r50", "inswapper_128", "inswapper_128_fp16", "gfpgan_1.4")  # one item per face
SMALLER_DETECTOR = {"scrfd_10g": "scrfd_2.5g"}
WORKSPACES = (1 * GiB, 512 * MiB, 256 * MiB)
BATCHES = (8, 4, 2, 1)


@dataclass(frozen=True)
class DeviceMemory:
    """One CUDA device as the plan sees it."""

    name: str
    total: int  # bytes
    free: int  # bytes free now


@dataclass(frozen=True)
class PlanRequest:
    """What the run would like: its models (catalog names), enhancer, most faces per frame."""

    detector: str = "scrfd_10g"
    embedder: str | None = "arcface_w600k_r50"
    swapper: str = "inswapper_128"
    landmarker: str | None = "2dfan4"
    enhancer: str | None = None  # e.g. "gfpgan_1.4" when the run asks for it
    max_faces: int = 8
    fp16_allowed: bool = True
    smaller_detector: bool = True  # whether the smaller detector's file is there to switch to


@dataclass
class VramPlan:
    """The chosen set and its estimate; `fits` False with `reason` when nothing fits."""

    device: DeviceMemory
    budget: int
    precision: str
    detector: str
    swapper: str
    enhancer: str | None
    batch: int
    workspace: int
    estimate: int
    items: dict[str, int] = field(default_factory=dict)  # bytes per part
    given_up: list[str] = field(default_factory=list)  # the first choices the plan gave up to fit
    fits: bool = True
    reason: str | None = None

    def line(self) -> str:
        """The plan in one line, printed at the start of a GPU run."""
        if not self.fits:
            return f"VRAM plan: {self.reason}"
        models = ", ".join(m for m in (self.detector, self.swapper, self.enhancer) if m)
        gave = f"; to fit, gave up {', '.join(self.given_up)}" if self.given_up else ""
        return (f"VRAM plan on {self.device.name}: {_gb(self.estimate)} of {_gb(self.budget)} budget "
                f"({_gb(self.device.free)} free of {_gb(self.device.total)}): {self.precision}, "
                f"{models}, batch {self.batch}, workspace {_gb(self.workspace)}{gave}")

    def as_dict(self) -> dict[str, object]:
        return {"device": self.device.name, "total": self.device.total, "free": self.device.free,
                "budget": self.budget, "fits": self.fits, "reason": self.reason,
                "precision": self.precision, "detector": self.detector, "swapper": self.swapper,
                "enhancer": self.enhancer, "batch": self.batch, "workspace": self.workspace,
                "estimate": self.estimate, "items": dict(self.items), "given_up": list(self.given_up)}


def _lost(key: str, value: object) -> str:
    """What the plan gave up, in words: the first choice of `key`."""
    if key == "batch":
        return f"batch {value}"
    if key == "workspace":
        return f"the {_gb(int(value))} workspace"  # type: ignore[call-overload]
    return str(value)


def _gb(n: int) -> str:
    return f"{n / GiB:.2f} GB" if n >= GiB else f"{n / MiB:.0f} MB"


def budget_for(device: DeviceMemory, max_vram: int | None = None) -> int:
    """The bytes a run may plan for: 85% of the card, within what is free, within the cap."""
    budget = min(int(device.total * CARD_SHARE), device.free - FREE_MARGIN)
    if max_vram is not None:
        budget = min(budget, max_vram)
    return max(budget, 0)


def estimate(models: list[str], precision: str, batch: int, workspace: int) -> dict[str, int]:
    """Bytes per part for these models at this precision, batch and workspace."""
    half = precision == "fp16"
    items = {"cuda context": CONTEXT_BYTES, "tensorrt workspace": workspace}
    for name in models:
        weights = WEIGHTS.get(name, 200 * MiB)
        if half or name.endswith("_fp16"):
            weights //= 2
        per_item = ACTIVATIONS.get(name, 64 * MiB)
        if half:
            per_item //= 2
        items[name] = weights + per_item * (batch if name in BATCHED else 1)
    return items


def plan_vram(device: DeviceMemory, request: PlanRequest | None = None, max_vram: int | None = None) -> VramPlan:
    """The best set that fits the budget; `given_up` names the first choices it left
    (cheapest loss first: fp16, smaller workspace and batches, the enhancer, the detector)."""
    req = request or PlanRequest()
    budget = budget_for(device, max_vram)
    batch_cap = max(1, req.max_faces)
    state = {"precision": "fp32", "detector": req.detector, "enhancer": req.enhancer,
             "batch": next(b for b in BATCHES if b <= batch_cap),
             "workspace": WORKSPACES[0]}
    def current() -> tuple[int, dict[str, int]]:
        models = [m for m in (state["detector"], req.embedder, req.swapper, req.landmarker, state["enhancer"]) if m]
        items = estimate(models, str(state["precision"]), int(state["batch"]), int(state["workspace"]))
        return sum(items.values()), items

    # Cheapest loss first. The workspace and the batch shrink in turn: neither alone costs
    # much speed; the enhancer and the large detector cost quality, so they go last.
    steps: list[tuple[str, object]] = []
    if req.fp16_allowed:
        steps.append(("precision", "fp16"))
    sizes = [("workspace", w) for w in WORKSPACES[1:]]
    batches = [("batch", b) for b in BATCHES if b < int(state["batch"])]
    while sizes or batches:
        steps.extend(x.pop(0) for x in (sizes, batches) if x)
    if req.enhancer:
        steps.append(("enhancer", None))
    if req.detector in SMALLER_DETECTOR and req.smaller_detector:
        steps.append(("detector", SMALLER_DETECTOR[req.detector]))
    first = dict(state)
    total, items = current()
    for key, value in steps:
        if total <= budget:
            break
        state[key] = value
        total, items = current()
    given_up = [_lost(key, first[key]) for key in first if state[key] != first[key]]
    plan = VramPlan(device, budget, str(state["precision"]), str(state["detector"]), req.swapper,
                    state["enhancer"] if state["enhancer"] else None, int(state["batch"]),
                    int(state["workspace"]), total, items, given_up)
    if total > budget:
        plan.fits = False
        why = "--max-vram" if max_vram is not None and max_vram < device.total * CARD_SHARE else "this card"
        plan.reason = (f"the smallest set ({plan.precision}, {plan.detector}, {plan.swapper}, batch 1) needs "
                       f"{_gb(total)}, more than the {_gb(budget)} {why} allows on {device.name} "
                       f"({_gb(device.free)} free of {_gb(device.total)})")
    return plan


def device_memory(device_id: int = 0) -> DeviceMemory | None:
    """The CUDA device's name and memory through cupy; None without cupy or a device."""
    try:
        import cupy

        if int(cupy.cuda.runtime.getDeviceCount()) <= device_id:
            return None
        with cupy.cuda.Device(device_id):
            free, total = cupy.cuda.runtime.memGetInfo()
        props = cupy.cuda.runtime.getDeviceProperties(device_id)
        name = props.get("name", b"CUDA device")
        return DeviceMemory(name.decode() if isinstance(name, bytes) else str(name), int(total), int(free))
    except Exception:  # no cupy, no driver, no device: no plan
        return None
