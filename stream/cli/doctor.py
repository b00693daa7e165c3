"""`facestream doctor`: one screen that says what this machine can do and what is missing,
each missing part with the command that fixes it. It changes nothing and exits 0."""
from __future__ import annotations

import importlib
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from stream.config import Config


@dataclass
class Finding:
    """One line of the report: what was checked, what was found, and the fix when missing."""

    section: str
    what: str
    found: str
    ok: bool
    fix: str | None = None
    required: bool = False  # missing and required: runs fail without it

    def line(self) -> str:
        mark = "ok " if self.ok else ("!! " if self.required else "-- ")
        fix = f"\n      fix: {self.fix}" if self.fix and not self.ok else ""
        return f"  {mark}{self.what:<22} {self.found}{fix}"


def _version(module: str) -> str | None:
    try:
        mod = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - not installed, or broken: both read "missing"
        return None
    return str(getattr(mod, "__version__", getattr(mod, "VERSION", "installed")))


PACKAGES = (  # module, pip name, what it is for, required
    ("numpy", "numpy", "arrays", True),
    ("av", "av", "decoding and encoding (PyAV)", True),
    ("cv2", "opencv-python", "pictures and blending", True),
    ("dlib", "dlib-bin", "the embedded default engine", True),
    ("onnxruntime", "onnxruntime (or onnxruntime-gpu)", "the neural models", True),
    ("aiortc", "aiortc", "WebRTC (serve)", True),
    ("pyvirtualcam", "pyvirtualcam", "virtual camera output", False),
    ("cupy", "cupy-cuda12x (or cupy-cuda13x)", "pinned memory and CUDA streams", False),
    ("tensorrt", "tensorrt-cu12 (its libraries come from NVIDIA's index)", "native TensorRT", False),
)


def check_packages() -> list[Finding]:
    found = [Finding("python", "python", f"{platform.python_version()} ({sys.executable})",
                     sys.version_info >= (3, 10), "install Python 3.10 or newer")]
    for module, pip_name, purpose, required in PACKAGES:
        version = _version(module)
        found.append(Finding("python", module, f"{version} ({purpose})" if version else f"not installed ({purpose})",
                             version is not None, f"pip install {pip_name}", required))
    if _version("cv2") is not None:
        found.append(_opencv_dispatch())
    found.append(_int8_instructions())
    return found


def _int8_instructions() -> Finding:
    """Whether this CPU runs INT8 models fast (VNNI, AMX, Arm dot product): what
    `--precision auto` reads before it picks an INT8 file (engines.quantize.choose)."""
    from engines.cpu_features import cpu_features

    cpu = cpu_features()
    if cpu.int8_fast:
        return Finding("python", "cpu int8", f"{', '.join(cpu.int8)}: --precision auto runs the INT8 files that "
                       f"passed their budget (`facestream models quantize NAME`)", True)
    return Finding("python", "cpu int8", f"no VNNI, AMX or Arm dot product ({cpu.model}): --precision auto keeps "
                   f"the float files; --precision int8 runs INT8 files anyway, often no faster", False,
                   "none needed: float runs as before")


def _opencv_dispatch() -> Finding:
    """What OpenCV dispatches to on this CPU, and how the neural paste-back's region warp
    compares with the full-frame warp here (part of a bug report about differing pixels)."""
    import cv2

    from engines.geometry.region_warp import BOUND, current

    choice = current()
    ipp = cv2.ipp.getIppVersion() if cv2.ipp.useIPP() else "IPP off"
    how = "equals" if choice.exact else f"within {choice.max_diff:g} grey levels of"
    return Finding("python", "opencv dispatch",
                   f"{choice.cpu}; {ipp}; region warp: {choice.scheme}, {how} the full warp",
                   choice.max_diff <= BOUND, f"report this line: the region warp exceeds its bound ({BOUND})")


def check_gpu(config: Config) -> tuple[list[Finding], object | None]:
    """ONNX Runtime's providers, CUDA devices and memory, pinned memory; and the device."""
    from stream.job.vram_plan import device_memory

    out: list[Finding] = []
    try:
        import onnxruntime as ort

        providers = ort.get_available_providers()
    except Exception:  # noqa: BLE001
        providers = []
    gpu_providers = [p for p in providers if p in ("CUDAExecutionProvider", "TensorrtExecutionProvider")]
    out.append(Finding("gpu", "onnxruntime providers", ", ".join(p.removesuffix("ExecutionProvider")
                                                                 for p in providers) or "none",
                       bool(gpu_providers), "for the GPU: pip uninstall onnxruntime && pip install onnxruntime-gpu"))
    out.append(check_openvino(config))
    device = device_memory(config.runtime.device_id)
    if device is None:
        out.append(Finding("gpu", "CUDA device", "none found: the models run on the CPU", False,
                           "an NVIDIA GPU with its driver, and cupy-cuda12x or cupy-cuda13x to see it"))
    else:
        out.append(Finding("gpu", "CUDA device", f"{device.name}, {device.free / 2**30:.1f} GB free of "
                           f"{device.total / 2**30:.1f} GB", True))
        out.append(_pinned_memory())
    return out, device


def check_openvino(config: Config) -> Finding:
    """OpenVINO (`--runtime openvino`): its version, the devices it sees, and the one a run
    with this config's runtime.device would use."""
    from engines.backends.openvino import INSTALL, OpenVinoUnavailable, auto_choice, device_seen, devices

    try:
        seen = devices()
    except OpenVinoUnavailable:
        return Finding("gpu", "openvino", "not installed (--runtime openvino: laptop CPUs, Intel GPUs, NPUs)",
                       False, INSTALL)
    except Exception as exc:  # noqa: BLE001 - installed but broken: the doctor reports it
        return Finding("gpu", "openvino", f"installed, but cannot list its devices ({exc})", False,
                       "pip install --force-reinstall openvino")
    names = [name for name, _ in seen]
    version = (_version("openvino") or "").split("-")[0]
    listed = ", ".join(f"{name} ({full})" if full and name != "CPU" else name for name, full in seen) or "no device"
    wanted = config.runtime.device
    use = f"AUTO, here {auto_choice(names)}" if wanted == "AUTO" else wanted
    ok = device_seen(wanted, names)
    return Finding("gpu", "openvino", f"{version}, sees {listed}; --runtime openvino would use {use}"
                   + ("" if ok else " (not seen)"), ok, f"--device {auto_choice(names)}, a device it sees")


def _pinned_memory() -> Finding:
    from stream.runtime.allocator import PinnedAllocator

    try:
        PinnedAllocator().empty((1024, 1024), "uint8")
    except Exception as exc:  # noqa: BLE001
        return Finding("gpu", "pinned memory", f"cannot allocate ({exc})", False,
                       "raise the locked-memory limit (ulimit -l) or check the CUDA driver")
    return Finding("gpu", "pinned memory", "1 MB page-locked block allocated", True)


def check_models(config: Config) -> list[Finding]:
    from engines.catalog import CATALOG, locate, search_dirs

    dirs = search_dirs(config.models.dir)
    out = []
    for name, item in CATALOG.items():
        where = locate(name, config.models.dir)
        out.append(Finding("models", name, str(where) if where else f"missing ({item.kind})", where is not None,
                           f"put {item.file} in {dirs[0]} (or: facestream models fetch {name})"))
    usable = any(f.ok for f in out)
    out.append(Finding("models", "embedded default", "dlib (no model files needed)",
                       _version("dlib") is not None and _dlib_weights(),
                       "pip install dlib-bin face_recognition_models", required=True))
    if not usable:
        out[-1].found += "; no neural model files found, so runs use it"
    return out


def _dlib_weights() -> bool:
    """face_recognition_models' weights are there (found without importing the package,
    whose `__init__` needs setuptools' pkg_resources: engines/dlib/models.py)."""
    from engines.dlib.models import model_path
    from engines.errors import ModelNotFound

    try:
        model_path("landmarks")
        model_path("embedding")
    except ModelNotFound:
        return False
    return True


def check_live() -> list[Finding]:
    out = []
    devices = sorted(str(p) for p in Path("/dev").glob("video*")) if sys.platform.startswith("linux") else []
    loopback = [d for d in devices if _is_loopback(d)]
    out.append(Finding("live", "virtual camera", ", ".join(loopback) if loopback else
                       ("no v4l2loopback device" + (f" (cameras: {', '.join(devices)})" if devices else "")),
                       bool(loopback), "sudo modprobe v4l2loopback exclusive_caps=1 card_label=facestream "
                       "(package v4l2loopback-dkms)"))
    out.append(Finding("live", "webcams", ", ".join(d for d in devices if d not in loopback) or "none", True))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    out.append(Finding("tests", "chromium", chromium or "not found (only the page's browser test needs it)",
                       chromium is not None, "sudo apt-get install chromium (or: make test-deps)"))
    out.append(Finding("tests", "RTSP test server", "GStreamer's RTSP server" if _gst_rtsp() else
                       "not found (the RTSP tests and the README's local recipe need it)", _gst_rtsp(),
                       "sudo apt-get install python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-good "
                       "gstreamer1.0-plugins-bad (or: make test-deps)"))
    ffmpeg = shutil.which("ffmpeg")
    out.append(Finding("tests", "ffmpeg", ffmpeg or "not found", ffmpeg is not None, "sudo apt-get install ffmpeg"))
    return out


def _is_loopback(device: str) -> bool:
    name = Path("/sys/class/video4linux") / Path(device).name / "name"
    try:
        text = name.read_text().lower()
    except OSError:
        return False
    return "loopback" in text or "facestream" in text or "dummy" in text


def _gst_rtsp() -> bool:
    python = "/usr/bin/python3"
    if not os.path.exists(python):
        return False
    try:
        return subprocess.run([python, "-c", "import gi; gi.require_version('GstRtspServer', '1.0'); "
                               "from gi.repository import GstRtspServer"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def plan_lines(config: Config, device: object | None, max_vram: int | None) -> list[str]:
    """What the default run would do here."""
    from stream.job.run_plan import gpu_runtime, request_for
    from stream.job.vram_plan import DeviceMemory, plan_vram

    lines = [f"engine: {config.engine} (auto: the neural set when its files are found, else dlib); "
             f"runtime: {config.runtime.kind}"]
    if isinstance(device, DeviceMemory):
        if not gpu_runtime(config.runtime):
            lines.append("the GPU is not used by this runtime as installed (ONNX Runtime without its CUDA "
                         "provider): install onnxruntime-gpu, or run with --runtime tensorrt; with the GPU:")
        lines.append(plan_vram(device, request_for(config), max_vram).line())
    else:
        lines.append(f"no GPU: every model runs on the CPU ({os.cpu_count()} cores; tools/bench.py measures "
                     "what this machine does)")
    return lines


def report(config: Config, max_vram: int | None = None) -> tuple[list[Finding], list[str]]:
    """Every finding, and the plan; a check that breaks is a finding too, never an exit."""
    findings: list[Finding] = []
    device = None
    checks = (("python", check_packages), ("gpu", lambda: check_gpu(config)), ("models", lambda: check_models(config)),
              ("live", check_live))
    for section, check in checks:
        try:
            result = check()
        except Exception as exc:  # noqa: BLE001 - the doctor reports, it does not fail
            findings.append(Finding(section, "check", f"could not run ({type(exc).__name__}: {exc})", False))
            continue
        if section == "gpu":
            result, device = result
        findings += result
    try:
        plan = plan_lines(config, device, max_vram)
    except Exception as exc:  # noqa: BLE001
        plan = [f"no plan ({type(exc).__name__}: {exc})"]
    return findings, plan


def run_doctor(config: Config, max_vram: int | None = None) -> int:
    """Print the report; `max_vram` (default: the config's runtime.max_vram) caps the plan."""
    cap = config.runtime.max_vram if max_vram is None else max_vram
    findings, plan = report(config, int(cap) if cap is not None else None)
    titles = {"python": "Python and packages", "gpu": "GPU", "models": "Models", "live": "Live I/O",
              "tests": "Test servers"}
    for section, title in titles.items():
        print(title)
        for finding in findings:
            if finding.section == section:
                print(finding.line())
    print("Plan for the default run")
    for line in plan:
        print(f"  {line}")
    required = sum(1 for f in findings if not f.ok and f.required)
    optional = sum(1 for f in findings if not f.ok and not f.required)
    if required:
        print(f"{required} required part(s) missing (!!): facestream cannot run until they are installed; "
              f"{optional} optional part(s) missing (--).")
    else:
        print(f"facestream runs here; {optional} optional part(s) missing (--), each with its fix above.")
    return 0
