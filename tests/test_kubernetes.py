"""deploy/kubernetes: kustomize renders it, every resource is valid against the Kubernetes API
schema (strict: an unknown field fails), the committed camera workers are the render of
cameras.yaml, and `facestream cameras` turns a bad list into one line."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from stream.cli.cameras_command import HEALTH_PORT, METRICS_PORT
from stream.cli.main import main
from stream.cli.parser import build_parser
from stream.cli.triton_repo_command import TRITON_IMAGE

ROOT = Path(__file__).resolve().parent.parent
KUBE = ROOT / "deploy" / "kubernetes"
CAMERAS = KUBE / "cameras.yaml"
WORKERS = KUBE / "cameras" / "workers.yaml"
KUBECTL = Path(sys.executable).parent / "kubectl"
K8S_VERSION = "1.37"  # the newest schema kubernetes-validate 1.37 ships
PODMAN_FLAGS = ["--image", "localhost/facestream:latest", "--pull-never", "--host-network",
                "--models-host-path", "/srv/facestream/models", "--no-probes"]


def kustomize() -> list[dict[str, Any]]:
    out = subprocess.run([str(KUBECTL), "kustomize", str(KUBE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def cameras(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    """The documents `facestream cameras ARGV` prints."""
    capsys.readouterr()
    assert main(["cameras", *argv]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


def validate(documents: list[dict[str, Any]]) -> None:
    for doc in documents:
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {path}: {exc.message}")


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def by_name(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in documents}


def test_the_kustomization_renders_resources_the_api_accepts() -> None:
    docs = kustomize()
    validate(docs)
    names = by_name(docs)
    assert {"Namespace/facestream", "PersistentVolumeClaim/facestream-models", "Deployment/facestream-serve",
            "Service/facestream-serve", "Deployment/facestream-triton", "Service/facestream-triton",
            "Deployment/camera-lobby", "Deployment/camera-entrance"} <= set(names)
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "facestream", doc["metadata"]
    images = {c["image"] for d in docs if d["kind"] == "Deployment" for c in containers(d)}
    assert images == {"localhost/facestream:0.1.0", TRITON_IMAGE}  # the images: entry reached every container


def test_every_pod_is_bounded_probed_and_scraped() -> None:
    for doc in (d for d in kustomize() if d["kind"] == "Deployment"):
        name = doc["metadata"]["name"]
        template = doc["spec"]["template"]
        assert template["metadata"]["annotations"]["prometheus.io/scrape"] == "true", name
        for container in containers(doc):
            limits = container["resources"]["limits"]
            assert "cpu" in limits and "memory" in limits, (name, container["name"])
            if container["image"].startswith("localhost/facestream"):
                assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
        main_container = template["spec"]["containers"][0]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert "httpGet" in main_container[probe], (name, probe)
    triton = by_name(kustomize())["Deployment/facestream-triton"]["spec"]["template"]["spec"]
    assert triton["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_serve_drains_within_its_grace_period() -> None:
    spec = by_name(kustomize())["Deployment/facestream-serve"]["spec"]["template"]["spec"]
    serve = spec["containers"][0]
    args = serve["args"]
    drain = int(args[args.index("--drain-seconds") + 1])
    pause = serve["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pause + drain < spec["terminationGracePeriodSeconds"]
    assert args[:5] == ["serve", "--host", "0.0.0.0", "--port", "8080"]


def test_the_facestream_commands_in_the_manifests_parse() -> None:
    """Every facestream container's args are a command line the real parser takes."""
    parser = build_parser()
    for doc in (d for d in kustomize() if d["kind"] == "Deployment"):
        for container in containers(doc):
            if container["image"].startswith("localhost/facestream"):
                args = [a.replace("$(CAMERA_INPUT)", "rtsp://secret/in") for a in container["args"]]
                parsed = parser.parse_args(args)
                assert parsed.command in ("serve", "live", "triton-repo"), args


def test_the_committed_workers_are_the_render_of_the_list(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)  # the failure then names the command to run from the checkout's root
    code = main(["cameras", str(CAMERAS.relative_to(ROOT)), "-o", str(WORKERS.relative_to(ROOT)), "--check"])
    assert code == 0, capsys.readouterr().err


def test_a_list_edited_without_a_render_fails_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edited = tmp_path / "cameras.yaml"
    data = yaml.safe_load(CAMERAS.read_text())
    data["cameras"][0]["output"] = "rtsp://elsewhere:8554/lobby"
    edited.write_text(yaml.safe_dump(data))
    assert main(["cameras", str(edited), "-o", str(WORKERS), "--check"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"facestream: error: {WORKERS} is not the render of {edited}: "
                   f"run `facestream cameras {edited} -o {WORKERS}`")


def test_a_camera_added_to_the_list_is_one_more_worker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load(CAMERAS.read_text())
    before = len(data["cameras"])
    data["cameras"].append({"name": "dock-2", "input": "rtsp://10.0.0.9:554/s", "output": "rtsp://relay:8554/dock-2",
                            "source": "/models/faces/other.jpg", "args": ["--max-faces", 2]})
    listed = tmp_path / "cameras.yaml"
    listed.write_text(yaml.safe_dump(data))
    out = tmp_path / "workers.yaml"
    assert main(["cameras", str(listed), "-o", str(out)]) == 0
    docs = [d for d in yaml.safe_load_all(out.read_text()) if d]
    validate(docs)
    assert len(docs) == before + 1
    new = docs[-1]
    assert new["metadata"]["name"] == "camera-dock-2" and new["spec"]["replicas"] == 1
    pod = new["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Always"
    args = pod["containers"][0]["args"]
    defaults = [str(a) for a in data["defaults"]["args"]]
    assert args == ["live", "--input", "rtsp://10.0.0.9:554/s", "--output", "rtsp://relay:8554/dock-2",
                    "--source", "/models/faces/other.jpg", "--name", "dock-2", "--ops-host", "0.0.0.0",
                    "--health-port", str(HEALTH_PORT), "--metrics-port", str(METRICS_PORT), "--drain-seconds", "20",
                    *defaults, "--max-faces", "2"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "facestream-models"


def test_a_url_from_a_secret_stays_out_of_the_render(capsys: pytest.CaptureFixture[str]) -> None:
    entrance = by_name(cameras(capsys, str(CAMERAS)))["Deployment/camera-entrance"]
    container = entrance["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][1:3] == ["--input", "$(CAMERA_INPUT)"]
    env = {e["name"]: e for e in container["env"]}
    assert env["CAMERA_INPUT"]["valueFrom"]["secretKeyRef"] == {"name": "entrance-camera", "key": "url"}


def test_the_podman_flavour_is_valid_and_on_the_host(capsys: pytest.CaptureFixture[str]) -> None:
    docs = cameras(capsys, str(CAMERAS), *PODMAN_FLAGS)
    validate(docs)
    ports = set()
    for doc in docs:
        pod = doc["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert pod["hostNetwork"] is True and "ports" not in container and "livenessProbe" not in container
        assert container["image"] == "localhost/facestream:latest" and container["imagePullPolicy"] == "Never"
        assert pod["volumes"][0]["hostPath"] == {"path": "/srv/facestream/models", "type": "Directory"}
        args = container["args"]
        ports |= {args[args.index("--health-port") + 1], args[args.index("--metrics-port") + 1]}
    assert len(ports) == 2 * len(docs)  # each camera its own ports on the shared network


def test_triton_is_the_release_triton_repo_names() -> None:
    spec = by_name(kustomize())["Deployment/facestream-triton"]["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == TRITON_IMAGE
    init = spec["initContainers"][0]["args"]
    assert init[0] == "triton-repo" and "--symlink" in init  # its links point into /models, mounted in both
    mounts = {m["name"]: m["mountPath"] for c in (spec["initContainers"][0], spec["containers"][0])
              for m in c["volumeMounts"]}
    assert mounts["models"] == "/models" and mounts["repository"] == init[1]


ENTRY = "  - {name: lobby, input: 'rtsp://c/1', output: 'rtsp://s/1', source: /f.jpg}\n"
BAD_LISTS = [
    ("not-yaml", "cameras: [unclosed\n", "not YAML"),
    ("not-a-mapping", "- a\n- b\n", "not a cameras list"),
    ("no-cameras", "cameras: []\n", "no cameras"),
    ("unknown-top-key", "camera:\n" + ENTRY, "unknown key 'camera'"),
    ("no-input", "cameras:\n" + ENTRY + "  - {name: hall, output: 'rtsp://s/2', source: /f.jpg}\n",
     "camera 'hall' (entry 2): no input"),
    ("no-output", "cameras:\n" + ENTRY + "  - {name: hall, input: 'rtsp://c/2', source: /f.jpg}\n",
     "camera 'hall' (entry 2): no output"),
    ("no-source", "cameras:\n  - {name: hall, input: 'rtsp://c/2', output: 'rtsp://s/2'}\n", "no source"),
    ("duplicate", "cameras:\n" + ENTRY + ENTRY, "camera 'lobby' (entry 2): the name of entry 1 too"),
    ("bad-name", "cameras:\n  - {name: Lobby_1, input: 'rtsp://c/1', output: 'rtsp://s/1', source: /f.jpg}\n",
     "(a Kubernetes name)"),
    ("no-name", "cameras:\n  - {input: 'rtsp://c/1', output: 'rtsp://s/1', source: /f.jpg}\n", "entry 1: no name"),
    ("unknown-key", "cameras:\n  - {name: a, inputs: 'rtsp://c/1', output: 'rtsp://s/1', source: /f.jpg}\n",
     "unknown key 'inputs'"),
    ("not-rtsp", "cameras:\n  - {name: a, input: 'http://c/1', output: 'rtsp://s/1', source: /f.jpg}\n",
     "input 'http://c/1' is not an rtsp://"),
    ("both", "cameras:\n  - {name: a, input: 'rtsp://c/1', input_secret: {name: s, key: k}, output: 'rtsp://s/1',"
             " source: /f.jpg}\n", "both input and input_secret"),
    ("bad-secret", "cameras:\n  - {name: a, input_secret: {name: s}, output: 'rtsp://s/1', source: /f.jpg}\n",
     "input_secret must be {name: SECRET, key: KEY}"),
    ("reserved-arg", "cameras:\n  - {name: a, input: 'rtsp://c/1', output: 'rtsp://s/1', source: /f.jpg,"
                     " args: ['--name=b']}\n", "--name is set by the list"),
    ("args-not-list", "cameras:\n  - {name: a, input: 'rtsp://c/1', output: 'rtsp://s/1', source: /f.jpg,"
                      " args: --fast}\n", "args must be a list"),
    ("bad-preset", "cameras:\n  - {name: a, input: 'rtsp://c/1', output: 'rtsp://s/1', source: /f.jpg,"
                   " preset: turbo}\n", "preset 'turbo' is neither a shipped preset"),
]


@pytest.mark.parametrize("text,needle", [(t, n) for _, t, n in BAD_LISTS], ids=[i for i, _, _ in BAD_LISTS])
def test_a_bad_list_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str) -> None:
    listed = tmp_path / "cameras.yaml"
    listed.write_text(text)
    out = tmp_path / "workers.yaml"
    assert main(["cameras", str(listed), "-o", str(out)]) == 1
    assert_one_line(capsys, needle)
    assert not out.exists()


@pytest.mark.parametrize("argv,needle", [
    (["{dir}/none.yaml"], "no such file"),
    (["{dir}"], "is a folder"),
    ([str(CAMERAS), "--models-host-path", "models"], "must be an absolute path"),
    ([str(CAMERAS), "--check"], "give -o"),
    ([str(CAMERAS), "-o", "{dir}/no/such/workers.yaml"], "no such folder"),
], ids=["missing", "folder", "relative-host-path", "check-without-o", "no-output-folder"])
def test_bad_command_lines_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                        needle: str) -> None:
    assert main(["cameras", *(a.format(dir=tmp_path) for a in argv)]) == 1
    assert_one_line(capsys, needle)


def assert_one_line(capsys: pytest.CaptureFixture[str], needle: str) -> None:
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("facestream: error:") and needle in lines[0], (needle, lines[0])
    assert "Traceback" not in captured.err + captured.out


def _podman_ready() -> bool:
    """podman, and the catatonit its pods' infra containers are made from."""
    return shutil.which("podman") is not None and any(
        Path(p).is_file() for p in ("/usr/bin/catatonit", "/usr/libexec/podman/catatonit"))


@pytest.mark.image
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FACESTREAM_IMAGE_TEST") != "1" or not _podman_ready(),
                    reason="make image-test runs it, on the built image (podman with catatonit)")
def test_podman_kube_play_takes_the_podman_flavour(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`podman kube play --start=false` creates the pod of a one-camera render (nothing runs):
    the container has the worker's command, the host's network and the models folder. On the
    image `make image` built: making a stand-in image inside the long test run once left
    podman's unpacking helper spinning for 15 minutes (alone it takes 0.1 s)."""
    tag = os.environ.get("FACESTREAM_IMAGE", "localhost/facestream:latest")
    name = f"kubetest-{uuid.uuid4().hex[:6]}"
    listed = tmp_path / "one.yaml"
    listed.write_text(f"cameras:\n  - {{name: {name}, input: 'rtsp://127.0.0.1:8554/in', "
                      f"output: 'rtsp://127.0.0.1:8554/out', source: /models/face.jpg}}\n")
    models = tmp_path / "models"
    models.mkdir()
    play = tmp_path / "pod.yaml"
    flags = ["--image", tag, "--pull-never", "--host-network", "--models-host-path", str(models), "--no-probes"]
    assert main(["cameras", str(listed), "-o", str(play), *flags]) == 0

    def podman(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["podman", *args], input=data, capture_output=True, timeout=120)

    try:
        played = podman("kube", "play", "--start=false", str(play))
        assert played.returncode == 0, played.stderr.decode()
        container = f"camera-{name}-pod-0-live"
        fmt = "{{json .Config.Cmd}}|{{.HostConfig.NetworkMode}}|{{.HostConfig.ReadonlyRootfs}}|{{.Config.User}}"
        inspected = podman("inspect", container, "--format", fmt)
        assert inspected.returncode == 0, inspected.stderr.decode()
        cmd, network, readonly, user = inspected.stdout.decode().strip().split("|")
        worker = yaml.safe_load(play.read_text().split("---", 1)[1])
        assert yaml.safe_load(cmd) == worker["spec"]["template"]["spec"]["containers"][0]["args"]
        assert (network, readonly, user) == ("host", "true", "10001:10001")
        mounts = podman("inspect", container, "--format", "{{range .Mounts}}{{.Source}}={{.Destination}} {{end}}")
        assert f"{models}=/models" in mounts.stdout.decode().split()
    finally:
        podman("kube", "down", str(play))
