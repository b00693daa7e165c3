"""A model served by NVIDIA Triton Inference Server behind the inference-runtime protocol
(engines.backends.base): named inputs in, named outputs out, over gRPC.

The model's name on the server is its catalog name (engines.catalog: det_10g.onnx is
`scrfd_10g`), else the file's stem: what `facestream triton-repo` writes. `open()` checks
that a server is ready and serves the model, and that the server's tensors (its model
metadata and config) are those of the local ONNX file, which the model classes read too.

`run` stays synchronous for its caller, but each call is an asynchronous request, so the
threads of a pipeline (and the pipelines of a process) keep several in flight and the
server batches them with those of other processes; a batch above the server's
max_batch_size goes as several requests at once. A server that goes away is retried
(engines.backends.triton.servers): the call waits for one to answer until `triton_timeout`.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from engines.backends.base import HostAllocator, HostBuffers, RuntimeOptions, TensorSpec, open_expecting
from engines.backends.onnx_io import read_onnx
from engines.backends.triton.servers import Server, TritonServers, is_going, is_gone, reason, status_of
from engines.catalog import CATALOG
from engines.errors import EngineError, ModelNotFound

log = logging.getLogger(__name__)

# Element types as ONNX Runtime names them (what TensorSpec holds) and as Triton does.
TRITON_TYPES = {"tensor(float)": "FP32", "tensor(uint8)": "UINT8", "tensor(int8)": "INT8",
                "tensor(int32)": "INT32", "tensor(int64)": "INT64", "tensor(bool)": "BOOL",
                "tensor(float16)": "FP16", "tensor(double)": "FP64", "tensor(uint16)": "UINT16",
                "tensor(int16)": "INT16", "tensor(uint32)": "UINT32", "tensor(uint64)": "UINT64",
                "tensor(bfloat16)": "BF16", "tensor(string)": "BYTES"}
FROM_TRITON = {v: k for k, v in TRITON_TYPES.items()}


INT8_SUFFIX = "_int8"  # `<stem>_int8.onnx`: the INT8 file beside its float original


def model_name(path: str | os.PathLike[str]) -> str:
    """The model's name on a Triton server: its catalog name, else the file's stem. An INT8
    file (`<stem>_int8.onnx`) has its float original's name: precision is the server's
    choice (`facestream triton-repo --precision`), and the tensors are the same."""
    file = Path(path)
    if file.stem.endswith(INT8_SUFFIX) and len(file.stem) > len(INT8_SUFFIX):
        file = file.with_name(file.stem[:-len(INT8_SUFFIX)] + file.suffix)
    for entry in CATALOG.values():
        if entry.file == file.name:
            return entry.name
    return file.stem


def _fmt(spec: TensorSpec) -> str:
    dims = ",".join("?" if d is None else str(d) for d in spec.shape)
    return f"{TRITON_TYPES.get(spec.dtype, spec.dtype)} [{dims}]"


def merge_specs(model: str, where: str, kind: str, local: list[TensorSpec],
                served: list[TensorSpec]) -> list[TensorSpec]:
    """The tensors a caller may use: the file's, with each axis the server fixes fixed.
    A one-line EngineError naming the model and the tensor when they disagree."""
    by_name = {s.name: s for s in served}
    extra = sorted(set(by_name) - {s.name for s in local})
    out = []
    for mine in local:
        theirs = by_name.get(mine.name)
        if theirs is None:
            raise EngineError(f"triton {where}: model {model!r} has no {kind} {mine.name!r} (the ONNX file "
                              f"has it; the server's {kind}s: {', '.join(sorted(by_name)) or 'none'})")
        same_rank = len(mine.shape) == len(theirs.shape)
        fits = same_rank and all(a is None or b is None or a == b for a, b in zip(mine.shape, theirs.shape))
        if mine.dtype != theirs.dtype or not fits:
            raise EngineError(f"triton {where}: model {model!r} {kind} {mine.name!r} is {_fmt(theirs)} on the "
                              f"server but {_fmt(mine)} in the ONNX file")
        shape = tuple(a if a is not None else b for a, b in zip(mine.shape, theirs.shape))
        out.append(TensorSpec(mine.name, shape, mine.dtype))
    if extra:
        raise EngineError(f"triton {where}: model {model!r} has {kind}(s) {', '.join(map(repr, extra))} "
                          f"that the ONNX file has not")
    return out


def served_specs(metadata: dict[str, Any], key: str, max_batch: int) -> list[TensorSpec]:
    """A server's model metadata (JSON) as TensorSpecs, the batch axis included when batched."""
    specs = []
    for item in metadata.get(key, []):
        dims = tuple(None if int(d) < 0 else int(d) for d in item.get("shape", []))
        if max_batch > 0 and (not dims or dims[0] is not None):
            dims = (None, *dims)  # Triton reports the batch axis as -1 in the metadata; be sure
        dtype = FROM_TRITON.get(item.get("datatype", ""), f"Triton type {item.get('datatype')}")
        specs.append(TensorSpec(item["name"], dims, dtype))
    return specs


class _Request:
    """One asynchronous request: its server, and the answer the callback leaves."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def callback(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error = result, error
        self.done.set()


class TritonRuntime:
    """One model on one or more Triton servers; `run` maps named inputs to named outputs."""

    def __init__(self, path: str | os.PathLike[str], options: RuntimeOptions | None = None,
                 allocator: HostAllocator | None = None, servers: TritonServers | None = None,
                 model: str | None = None) -> None:
        self.path = Path(path)
        self.options = options or RuntimeOptions(kind="triton")
        self.model = model or model_name(self.path)
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self.max_batch = 0  # the server's max_batch_size: 0 when the model takes no batch axis
        self.calls = 0  # `run` calls
        self.requests = 0  # requests sent (a batch above max_batch_size takes several; retries count)
        self._servers = servers  # shared with the factory's other runtimes; our own when None
        self._own_servers = servers is None
        self._open = False
        self._count = threading.Lock()
        self._host = HostBuffers(allocator)

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def servers(self) -> TritonServers:
        if self._servers is None:
            self._servers = TritonServers(list(self.options.triton_urls), self.options.triton_timeout)
        return self._servers

    # -- lifecycle -----------------------------------------------------------------

    def open(self) -> None:
        """Check the servers and the model's tensors; a one-line EngineError when the model
        cannot be served as the ONNX file describes it."""
        if self._open:
            return
        if not self.path.is_file():
            raise ModelNotFound(f"model file {str(self.path)!r} does not exist")
        graph = read_onnx(self.path)
        local_in, local_out = list(graph.inputs), list(graph.outputs)
        servers = self.servers
        checked: list[tuple[str, list[TensorSpec], list[TensorSpec], int]] = []
        unreachable: list[tuple[Server, BaseException]] = []
        for server in servers.servers:
            if not server.up:  # already known to be away (another model's open found it)
                continue
            try:
                checked.append((server.url, *self._describe(server, local_in, local_out)))
            except EngineError:
                raise
            except Exception as exc:
                if not is_gone(exc):
                    raise EngineError(f"triton {server.url}: model {self.model!r}: {reason(exc)}") from exc
                unreachable.append((server, exc))
        if not checked:
            why = "; ".join(f"{s.url}: {reason(e)}" for s, e in unreachable) or "every server is away"
            raise EngineError(f"triton {servers.describe()}: cannot reach a server for model {self.model!r} ({why})")
        url, self.inputs, self.outputs, self.max_batch = checked[0]
        for other, ins, outs, batch in checked[1:]:
            if (ins, outs, batch) != (self.inputs, self.outputs, self.max_batch):
                raise EngineError(f"triton: model {self.model!r} differs between {url} and {other} "
                                  f"(tensors or max_batch_size)")
        servers.models.add(self.model)
        for server, error in unreachable:
            servers.mark_down(server, error)
        self._open = True
        log.debug("%s: Triton model %r on %s, max batch %d", self.path.name, self.model, servers.describe(),
                  self.max_batch)

    def _describe(self, server: Server, local_in: list[TensorSpec],
                  local_out: list[TensorSpec]) -> tuple[list[TensorSpec], list[TensorSpec], int]:
        """The model's tensors on `server`, checked against the file's; max_batch_size."""
        client, wait = server.client, min(self.options.triton_timeout, 10.0)
        if not client.is_server_ready(client_timeout=wait):
            raise EngineError(f"triton {server.url}: the server is not ready")
        if not client.is_model_ready(self.model, client_timeout=wait):
            raise EngineError(f"triton {server.url}: {self._why_not_served(server, wait)}")
        meta = client.get_model_metadata(self.model, as_json=True, client_timeout=wait)
        config = client.get_model_config(self.model, as_json=True, client_timeout=wait).get("config", {})
        max_batch = int(config.get("max_batch_size", 0) or 0)
        ins = merge_specs(self.model, server.url, "input", local_in, served_specs(meta, "inputs", max_batch))
        outs = merge_specs(self.model, server.url, "output", local_out, served_specs(meta, "outputs", max_batch))
        return ins, outs, max_batch

    def _why_not_served(self, server: Server, wait: float) -> str:
        index = server.client.get_model_repository_index(as_json=True, client_timeout=wait).get("models", [])
        for item in index:
            if item.get("name") == self.model:
                why = item.get("reason") or "no reason given"
                return f"model {self.model!r} ({self.path.name}) is {item.get('state', 'not ready')} ({why})"
        names = ", ".join(sorted({str(i.get("name")) for i in index})) or "none"
        return f"does not serve model {self.model!r} ({self.path.name}); it serves: {names}"

    def open_expecting(self, what: str) -> None:
        """`open()`, with a load failure saying which kind of model file was expected
        (a missing file stays ModelNotFound)."""
        open_expecting(self, what)

    def close(self) -> None:
        """Forget the model; close our servers' connections (a factory's are closed by it)."""
        self._open = False
        self._host.clear()
        if self._own_servers and self._servers is not None:
            self._servers.close()
            self._servers = None

    # -- the per-call path -----------------------------------------------------------

    def host_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """A reusable host array for input `name`, from the runtime's allocator."""
        return self._host.get(name, shape, dtype)

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Named inputs in, named outputs out (all outputs unless `outputs` names some)."""
        if not self._open:
            self.open()
        names = list(outputs or [o.name for o in self.outputs])
        with self._count:
            self.calls += 1
        deadline = time.monotonic() + self.options.triton_timeout
        chunks = self._chunks(feeds)
        pending = [(chunk, self._send(chunk, names, deadline)) for chunk in chunks]
        parts = [self._answer(chunk, names, request, deadline) for chunk, request in pending]
        if len(parts) == 1:
            return parts[0]
        return {name: np.concatenate([p[name] for p in parts]) for name in names}

    def run_into(self, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Named inputs in, each output copied into the given host array where its shape is
        the answer's (engines.backends.bound_outputs); otherwise the answer's own array."""
        got = self.run(feeds, list(outputs))
        out = {}
        for name, target in outputs.items():
            value = got[name]
            if target.shape == value.shape:
                np.copyto(target, value, casting="same_kind")
                out[name] = target
            else:
                out[name] = value
        return out

    def _chunks(self, feeds: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        """The feeds split along the batch axis at the server's max_batch_size."""
        n = len(next(iter(feeds.values()))) if feeds else 0
        if self.max_batch <= 0 or n <= self.max_batch:
            return [feeds]
        step = self.max_batch
        return [{k: v[i:i + step] for k, v in feeds.items()} for i in range(0, n, step)]

    def _send(self, feeds: dict[str, np.ndarray], names: list[str], deadline: float) -> _Request:
        """Send one request to the next server that is up (waiting for one until `deadline`)."""
        import tritonclient.grpc as grpcclient  # type: ignore[import-untyped]

        types = {s.name: TRITON_TYPES.get(s.dtype, "FP32") for s in self.inputs}
        inputs = []
        for name, value in feeds.items():
            if name not in types:
                raise EngineError(f"triton: model {self.model!r} has no input {name!r} "
                                  f"(inputs: {', '.join(types)})")
            item = grpcclient.InferInput(name, list(value.shape), types[name])
            item.set_data_from_numpy(np.ascontiguousarray(value))
            inputs.append(item)
        wanted = [grpcclient.InferRequestedOutput(n) for n in names]
        while True:
            server = self.servers.pick(deadline)
            request = _Request(server)
            left = max(deadline - time.monotonic(), 0.001)
            try:
                with server.submit_lock:
                    server.client.async_infer(self.model, inputs, request.callback, outputs=wanted,
                                              client_timeout=left)
            except Exception as exc:
                if is_gone(exc) or is_going(exc):
                    self.servers.mark_down(server, exc)
                    continue
                raise EngineError(f"triton {server.url}: model {self.model!r}: {reason(exc)}") from exc
            with self._count:
                self.requests += 1
                server.requests += 1
            return request

    def _answer(self, feeds: dict[str, np.ndarray], names: list[str], request: _Request,
                deadline: float) -> dict[str, np.ndarray]:
        """Wait for a request's answer; a server gone meanwhile: the request again, elsewhere."""
        while True:
            server = request.server
            if not request.done.wait(max(deadline - time.monotonic(), 0) + 1.0):
                raise EngineError(f"triton {server.url}: model {self.model!r} did not answer within "
                                  f"{self.options.triton_timeout:g} s")
            error = request.error
            if error is None:
                return {n: np.array(request.result.as_numpy(n)) for n in names}
            # refused, reset, the model unloaded by a server shutting down, or cancelled by our reconnect
            if is_gone(error) or is_going(error) or not server.up:
                self.servers.mark_down(server, error)
                request = self._send(feeds, names, deadline)
                continue
            if status_of(error) == "StatusCode.DEADLINE_EXCEEDED":
                raise EngineError(f"triton {server.url}: model {self.model!r} did not answer within "
                                  f"{self.options.triton_timeout:g} s")
            raise EngineError(f"triton {server.url}: model {self.model!r}: {reason(error)}")
