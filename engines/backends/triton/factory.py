"""Runtimes for `runtime.kind: triton`: Triton for the models its servers serve, the local
ONNX Runtime for the rest.

One factory holds one `TritonServers` for all the models it makes (one connection per
server, an outage reported once) and asks the first server that answers for its model
repository index. A model the index does not list runs locally, and `notes` says so; a
model listed but not loaded is an error at the model's `open()` (the server's reason).
"""
from __future__ import annotations

import dataclasses
import logging
import os

from engines.backends.base import HostAllocator, InferenceRuntime, RuntimeOptions
from engines.backends.ort import OrtRuntime
from engines.backends.triton.runtime import TritonRuntime, model_name
from engines.backends.triton.servers import TritonServers, is_gone, reason
from engines.errors import EngineError

log = logging.getLogger(__name__)


def repository_index(servers: TritonServers) -> dict[str, str]:
    """Model name -> state, from the first server that answers (names on any server but
    another's are the operator's to keep apart: `open()` checks each model on every one);
    a one-line EngineError when none answers."""
    why = []
    wait = min(servers.timeout, 10.0)
    for server in servers.servers:
        try:
            index = server.client.get_model_repository_index(as_json=True, client_timeout=wait)
        except Exception as exc:
            if not is_gone(exc):
                raise EngineError(f"triton {server.url}: cannot list its models ({reason(exc)})") from exc
            why.append(f"{server.url}: {reason(exc)}")
            continue
        return {str(m.get("name")): str(m.get("state", "")) for m in index.get("models", [])}
    raise EngineError(f"triton {servers.describe()}: cannot connect ({'; '.join(why)})")


class TritonFactory:
    """Makes the runtime of each model file: a `TritonRuntime` when a server serves it,
    else an `OrtRuntime` with the same options (and a note saying so)."""

    def __init__(self, options: RuntimeOptions, allocator: HostAllocator | None = None) -> None:
        self.options = options
        self.allocator = allocator
        self.notes: list[str] = []
        self.servers: TritonServers | None = None
        self.served: dict[str, str] = {}
        self.local_options = dataclasses.replace(options, kind="onnxruntime")

    def __call__(self, path: str | os.PathLike[str]) -> InferenceRuntime:
        if self.servers is None:
            servers = TritonServers(list(self.options.triton_urls), self.options.triton_timeout)
            try:
                self.served = repository_index(servers)
            except BaseException:
                servers.close()
                raise
            self.servers = servers
        name = model_name(path)
        if name in self.served:
            return TritonRuntime(path, self.options, self.allocator, servers=self.servers, model=name)
        note = (f"triton {self.servers.describe()} does not serve {name!r}: "
                f"{os.path.basename(path)} runs on the local ONNX Runtime")
        self.notes.append(note)
        log.info("%s", note)
        return OrtRuntime(path, self.local_options, self.allocator)

    def close(self) -> None:
        """Close the connections to the servers (the runtimes made are unusable after)."""
        if self.servers is not None:
            self.servers.close()
            self.servers = None
