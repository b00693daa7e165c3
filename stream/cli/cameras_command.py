"""`facestream cameras LIST`: the Kubernetes Deployments of the camera workers, one
`facestream live` per camera (RTSP in, RTSP out), rendered from one YAML list.

Kustomize cannot loop over a list, so the workers' manifests are rendered here and the
render is committed beside the list (deploy/kubernetes/cameras/workers.yaml); `--check`
says whether a committed render is still the list's."""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stream.cli.parser import CliError
from stream.config import preset_names
from stream.media.atomic import write_bytes

LIST_KEYS = ("defaults", "cameras")
DEFAULT_KEYS = ("source", "preset", "args")
CAMERA_KEYS = ("name", "input", "input_secret", "output", "output_secret", "source", "preset", "args")
SECRET_KEYS = ("name", "key")
# A camera's name names its Deployment (camera-NAME) and labels its pods: a DNS-1123 label.
NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
NAME_MAX = 63 - len("camera-")
SECRET_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
SECRET_KEY_RE = re.compile(r"[-._a-zA-Z0-9]+")
URL_SCHEMES = ("rtsp://", "rtsps://")
# The flags a worker's command gets from the list and the render, not from `args`.
RESERVED_FLAGS = ("--input", "-i", "--output", "-o", "--source", "--config", "--name", "--ops-host",
                  "--health-port", "--metrics-port", "--drain-seconds")
# In a pod's own network every worker listens on the same ports; on the host's network
# (podman, or a cluster where the cameras are reached that way) camera N takes base + N.
HEALTH_PORT = 8100
METRICS_PORT = 8200
HOST_NETWORK_MAX = METRICS_PORT - HEALTH_PORT
DRAIN_SECONDS = 20
GRACE_SECONDS = 30  # the drain, and time to close after it
MODELS = "/models"
RUN_AS = 10001  # the image's user (numeric, so that runAsNonRoot can be verified)


@dataclass(frozen=True)
class Endpoint:
    """A camera's input or output: a URL written in the list, or a Secret's key that holds it
    (a URL with credentials stays out of the list and out of the render)."""

    url: str | None = None
    secret: tuple[str, str] | None = None


@dataclass(frozen=True)
class Camera:
    name: str
    input: Endpoint
    output: Endpoint
    source: str
    preset: str | None
    args: tuple[str, ...]


@dataclass(frozen=True)
class RenderOptions:
    """How the workers are deployed: the defaults suit a cluster; the rest lets podman
    kube play the same render on one machine."""

    image: str = "facestream"
    host_network: bool = False
    models_host_path: str | None = None
    pull_never: bool = False
    probes: bool = True

    def flags(self) -> list[str]:
        """The command-line flags that render with these options (the defaults left out)."""
        out = [] if self.image == "facestream" else ["--image", self.image]
        out += ["--host-network"] if self.host_network else []
        out += ["--models-host-path", self.models_host_path] if self.models_host_path else []
        out += ["--pull-never"] if self.pull_never else []
        return out + ([] if self.probes else ["--no-probes"])


def load_cameras(path: Path) -> list[Camera]:
    """The cameras of the list at `path`, checked; a CliError naming the entry otherwise."""
    if not path.exists():
        raise CliError(f"cameras: no such file: {path}")
    if path.is_dir():
        raise CliError(f"cameras: {path} is a folder, not a YAML list")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise CliError(f"{path}: not YAML ({problem}{where})") from None
    if not isinstance(data, dict):
        raise CliError(f"{path}: not a cameras list (expected a mapping with 'cameras:')")
    _known(data, LIST_KEYS, str(path))
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise CliError(f"{path}: defaults must be a mapping of {', '.join(DEFAULT_KEYS)}")
    _known(defaults, DEFAULT_KEYS, f"{path}: defaults")
    entries = data.get("cameras")
    if not entries:
        raise CliError(f"{path}: no cameras (add entries under 'cameras:')")
    if not isinstance(entries, list):
        raise CliError(f"{path}: cameras must be a list of entries")
    cameras = [_camera(entry, number, defaults, path) for number, entry in enumerate(entries, 1)]
    seen: dict[str, int] = {}
    for number, camera in enumerate(cameras, 1):
        if camera.name in seen:
            raise CliError(f"{path}: camera '{camera.name}' (entry {number}): the name of entry "
                           f"{seen[camera.name]} too; names must differ")
        seen[camera.name] = number
    return cameras


def _known(mapping: dict[Any, Any], keys: tuple[str, ...], where: str) -> None:
    for key in mapping:
        if key not in keys:
            raise CliError(f"{where}: unknown key {key!r} (known: {', '.join(keys)})")


def _camera(entry: Any, number: int, defaults: dict[str, Any], path: Path) -> Camera:
    """One entry of the list, with the list's defaults under it."""
    if not isinstance(entry, dict):
        raise CliError(f"{path}: entry {number}: not a mapping (name: ..., input: ..., output: ...)")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise CliError(f"{path}: entry {number}: no name")
    where = f"{path}: camera '{name}' (entry {number})"
    if not NAME_RE.fullmatch(name) or len(name) > NAME_MAX:
        raise CliError(f"{where}: the name must be lower-case letters, digits and '-', starting and "
                       f"ending with a letter or digit, at most {NAME_MAX} characters (a Kubernetes name)")
    _known(entry, CAMERA_KEYS, where)
    source = entry.get("source", defaults.get("source"))
    if not isinstance(source, str) or not source:
        raise CliError(f"{where}: no source (the photo of the face to put in, a path in the container; "
                       f"give source: here or under defaults:)")
    preset = entry.get("preset", defaults.get("preset"))
    if preset is not None and preset not in preset_names() and not str(preset).endswith((".yaml", ".yml")):
        raise CliError(f"{where}: preset {preset!r} is neither a shipped preset ({', '.join(preset_names())}) "
                       f"nor a .yaml file")
    args = _args(defaults.get("args"), f"{path}: defaults") + _args(entry.get("args"), where)
    return Camera(name=name, input=_endpoint(entry, "input", where), output=_endpoint(entry, "output", where),
                  source=source, preset=preset, args=args)


def _endpoint(entry: dict[str, Any], key: str, where: str) -> Endpoint:
    """`input`/`output` (an rtsp:// URL) or `input_secret`/`output_secret` ({name, key})."""
    url, secret = entry.get(key), entry.get(f"{key}_secret")
    if url is not None and secret is not None:
        raise CliError(f"{where}: both {key} and {key}_secret; give one")
    if secret is not None:
        if not isinstance(secret, dict) or set(secret) != set(SECRET_KEYS):
            raise CliError(f"{where}: {key}_secret must be {{name: SECRET, key: KEY}}")
        name, item = secret["name"], secret["key"]
        if not isinstance(name, str) or not SECRET_NAME_RE.fullmatch(name):
            raise CliError(f"{where}: {key}_secret name {name!r} is not a Kubernetes Secret's name")
        if not isinstance(item, str) or not SECRET_KEY_RE.fullmatch(item):
            raise CliError(f"{where}: {key}_secret key {item!r} is not a Secret's key")
        return Endpoint(secret=(name, item))
    if url is None:
        raise CliError(f"{where}: no {key} (give {key}: rtsp://... or {key}_secret: {{name, key}})")
    if not isinstance(url, str) or not url.startswith(URL_SCHEMES):
        raise CliError(f"{where}: {key} {url!r} is not an rtsp:// or rtsps:// URL")
    return Endpoint(url=url)


def _args(value: Any, where: str) -> tuple[str, ...]:
    """Extra `facestream live` arguments: a list of strings (numbers are taken as written)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                              for a in value):
        raise CliError(f"{where}: args must be a list of strings, e.g. [--detect-every, '3']")
    args = tuple(str(a) for a in value)
    for arg in args:
        flag = arg.partition("=")[0]
        if flag in RESERVED_FLAGS:
            raise CliError(f"{where}: args: {flag} is set by the list and the render, not by args")
    return args


def worker(camera: Camera, index: int, options: RenderOptions) -> dict[str, Any]:
    """The Deployment of one camera's worker (kinds and fields podman kube play reads too)."""
    offset = index if options.host_network else 0
    health, metrics = HEALTH_PORT + offset, METRICS_PORT + offset
    scratch = f"tmp-{camera.name}"  # podman makes an emptyDir a volume of this name: one per camera
    models = ({"hostPath": {"path": options.models_host_path, "type": "Directory"}} if options.models_host_path
              else {"persistentVolumeClaim": {"claimName": "facestream-models", "readOnly": True}})
    pod: dict[str, Any] = {"restartPolicy": "Always", "terminationGracePeriodSeconds": GRACE_SECONDS,
                           "automountServiceAccountToken": False}
    if options.host_network:  # the host's loopback and LAN; still the cluster's DNS names
        pod.update({"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"})
    pod.update({"containers": [_container(camera, health, metrics, scratch, options)],
                "volumes": [{"name": "models", **models}, {"name": scratch, "emptyDir": {"sizeLimit": "1Gi"}}]})
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(metrics), "prometheus.io/path": "/metrics"}

    def labels() -> dict[str, str]:  # a copy each time: the YAML then has no anchors
        return {"app.kubernetes.io/name": "facestream-camera", "app.kubernetes.io/instance": camera.name}

    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": f"camera-{camera.name}", "labels": labels()},
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"},  # never two workers publishing one output
                 "selector": {"matchLabels": labels()},
                 "template": {"metadata": {"labels": labels(), "annotations": annotations}, "spec": pod}},
    }


def _container(camera: Camera, health: int, metrics: int, scratch: str, options: RenderOptions) -> dict[str, Any]:
    """The worker's container: `facestream live` on the camera, its ops ports, a read-only root."""
    env = [{"name": "FACESTREAM_MODELS", "value": MODELS}, {"name": "HOME", "value": "/tmp"},
           {"name": "XDG_CACHE_HOME", "value": "/tmp/cache"}]
    args = ["live", "--input", _arg(camera.input, "CAMERA_INPUT", env),
            "--output", _arg(camera.output, "CAMERA_OUTPUT", env), "--source", camera.source]
    args += ["--config", camera.preset] if camera.preset else []
    args += ["--name", camera.name, "--ops-host", "0.0.0.0", "--health-port", str(health),
             "--metrics-port", str(metrics), "--drain-seconds", str(DRAIN_SECONDS), *camera.args]
    container: dict[str, Any] = {
        "name": "live", "image": options.image, "imagePullPolicy": "Never" if options.pull_never else "IfNotPresent",
        "args": args, "env": env,
    }
    if not options.host_network:  # on the host's network podman refuses ports (they are the host's anyway)
        container["ports"] = [{"name": "health", "containerPort": health},
                              {"name": "metrics", "containerPort": metrics}]
    if options.probes:
        container.update(_probes(health))
    container.update({
        "resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "3Gi"}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "models", "mountPath": MODELS, "readOnly": True},
                         {"name": scratch, "mountPath": "/tmp"}],
    })
    return container


def _arg(endpoint: Endpoint, variable: str, env: list[dict[str, Any]]) -> str:
    """The URL itself, or `$(VARIABLE)`, which Kubernetes expands from the Secret's key."""
    if endpoint.secret is None:
        assert endpoint.url is not None
        return endpoint.url
    name, key = endpoint.secret
    env.append({"name": variable, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}})
    return f"$({variable})"


def _probes(port: int) -> dict[str, Any]:
    """Started once /healthz answers (the models load and the camera opens first: up to 5
    minutes), restarted when it stops answering, out of readiness while /readyz says so."""
    def probe(path: str, period: int, failures: int) -> dict[str, Any]:
        # The port by number: podman before 4.6 reads no port names in probes.
        return {"httpGet": {"path": path, "port": port}, "periodSeconds": period, "timeoutSeconds": 3,
                "failureThreshold": failures}
    return {"startupProbe": probe("/healthz", 5, 60), "livenessProbe": probe("/healthz", 10, 3),
            "readinessProbe": probe("/readyz", 5, 2)}


def render(cameras: list[Camera], options: RenderOptions, list_name: str) -> str:
    """The workers' manifests as one YAML stream, with a header that says how to remake it."""
    if options.host_network and len(cameras) > HOST_NETWORK_MAX:
        raise CliError(f"cameras: --host-network gives each camera ports of its own: at most "
                       f"{HOST_NETWORK_MAX} cameras (the list has {len(cameras)})")
    rendered_with = " ".join(options.flags())
    header = [f"# The camera workers: one `facestream live` Deployment per camera of {list_name}.",
              "# Rendered by `facestream cameras`: do not edit. To add a camera, add an entry to",
              "# deploy/kubernetes/cameras.yaml and run",
              "#   facestream cameras deploy/kubernetes/cameras.yaml -o deploy/kubernetes/cameras/workers.yaml"]
    header += [f"# Rendered with: {rendered_with}"] if rendered_with else []
    documents = [yaml.safe_dump(worker(c, i, options), sort_keys=False, default_flow_style=False, width=120)
                 for i, c in enumerate(cameras)]
    return "\n".join(header) + "\n---\n" + "---\n".join(documents)


def _write(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (stream.media.atomic)."""
    if not path.parent.is_dir():
        raise CliError(f"cameras: -o {path}: no such folder {path.parent}")
    write_bytes(path, memoryview(text.encode("utf-8")))


def cmd_cameras(args: argparse.Namespace) -> int:
    if args.models_host_path and not args.models_host_path.startswith("/"):
        raise CliError(f"--models-host-path {args.models_host_path!r}: must be an absolute path")
    if args.check and not args.output:
        raise CliError("--check compares with the render in -o FILE: give -o")
    options = RenderOptions(image=args.image, host_network=args.host_network,
                            models_host_path=args.models_host_path, pull_never=args.pull_never,
                            probes=not args.no_probes)
    source = Path(args.list)
    cameras = load_cameras(source)
    text = render(cameras, options, source.name)
    if args.output is None:
        print(text, end="")
        return 0
    out = Path(args.output)
    if args.check:
        if not out.is_file() or out.read_text(encoding="utf-8") != text:
            again = " ".join(["facestream cameras", args.list, "-o", args.output, *options.flags()])
            raise CliError(f"{out} is not the render of {args.list}: run `{again}`")
        print(f"{out}: the render of {args.list} ({len(cameras)} camera(s))")
        return 0
    _write(out, text)
    print(f"wrote {out}: {len(cameras)} camera worker(s)")
    return 0
