"""`facestream triton-repo DIR`: a Triton model repository for the model files found, and
how to start the server on it."""
from __future__ import annotations

import argparse
from pathlib import Path

from stream.cli.parser import CliError

# NVIDIA's Triton container whose server is the release nvidia-pytriton 0.7.0 bundles (2.51):
# the ONNX Runtime and TensorRT backends on GPUs. The TensorRT container of the same month
# has the matching trtexec for building the plans.
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"
TENSORRT_IMAGE = "nvcr.io/nvidia/tensorrt:24.10-py3"
# The developers' server environment (nvidia-pytriton's bundled tritonserver, what the test
# suite serves): in a source checkout only, so users are pointed at the container first.
ENV_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "triton" / "env.py"
# The Python backend's model.py runs ONNX Runtime, which NVIDIA's container does not have.
PYTHON_BACKEND_PACKAGES = "onnxruntime numpy"


def find_models(models_dir: str | None) -> dict[str, Path]:
    """Catalog name -> file, for each catalog model found in the search folders."""
    from engines.catalog import CATALOG, locate, search_dirs

    if models_dir and not Path(models_dir).is_dir():
        raise CliError(f"--models-dir {models_dir}: no such folder")
    found = {name: path for name in CATALOG if (path := locate(name, models_dir)) is not None}
    if not found:
        folders = ", ".join(str(d) for d in search_dirs(models_dir))
        raise CliError(f"triton-repo: no model files found in {folders} (`facestream models` lists the files "
                       f"it looks for)")
    return found


def cmd_triton_repo(args: argparse.Namespace) -> int:
    from engines.backends.triton.repo import pick_files, read_spec, write_repository

    repo = Path(args.dir)
    if repo.exists() and not repo.is_dir():
        raise CliError(f"triton-repo: {repo} exists and is not a folder")
    models = pick_files(find_models(args.models_dir), args.precision)
    kind = "cpu" if args.cpu or args.backend == "python" else "gpu"
    written = write_repository(repo, models, backend=args.backend, max_batch=args.max_batch,
                               instances=args.instances, kind=kind, link=args.symlink)
    print(f"wrote a Triton model repository in {repo}: backend {args.backend}, {args.instances} instance(s) "
          f"per model on the {kind.upper()}, {len(written)} files")
    for name, path in models.items():
        spec = read_spec(path)
        batching = (f"batched up to {args.max_batch}, dynamic batching" if spec.batched
                    else "unbatched (the file's first axis is fixed)")
        print(f"  {name:<20} {path}  {'int8, ' if spec.quantized else ''}{batching}")
    print("start the server:")
    where = repo.resolve()
    if args.backend == "python":
        print(f"  docker run --rm -p 8000:8000 -p 8001:8001 -v {where}:/models {TRITON_IMAGE} sh -c "
              f"'pip install -q {PYTHON_BACKEND_PACKAGES} && tritonserver --model-repository=/models'")
        if ENV_SCRIPT.is_file():
            print(f"  # or, in this source checkout, with no container (nvidia-pytriton's bundled tritonserver, "
                  f"in an environment of its own built on first use):\n"
                  f"  python {ENV_SCRIPT} serve {where}")
    else:
        if args.backend == "tensorrt":
            print(f"  # first build the plans on the GPU that will serve them:\n"
                  f"  docker run --gpus all --rm -v {where}:/models -w /models {TENSORRT_IMAGE} sh build_plans.sh")
        gpus = "" if kind == "cpu" else "--gpus all "
        print(f"  docker run {gpus}--rm -p 8000:8000 -p 8001:8001 -v {where}:/models {TRITON_IMAGE} "
              "tritonserver --model-repository=/models")
    print("then: facestream swap ... --runtime triton --triton-url HOST:8001")
    return 0
