"""Server addresses as the runtime options hold them: a Triton server's gRPC address,
checked and written one way ('host:port') wherever it comes from (a preset, the CLI)."""
from __future__ import annotations

DEFAULT_GRPC_PORT = 8001  # Triton's own default for gRPC


def normalize_url(url: str) -> str:
    """'host:port' for tritonclient.grpc from 'host', 'host:port' or 'grpc://host:port';
    a ValueError naming the URL otherwise (an http:// URL: Triton's gRPC port is wanted)."""
    text = str(url).strip()
    scheme, sep, rest = text.partition("://")
    if sep:
        if scheme.lower() in ("http", "https"):
            raise ValueError(f"Triton URL {url!r}: give the server's gRPC address (host:port, "
                             f"by default port {DEFAULT_GRPC_PORT}), not an HTTP URL")
        if scheme.lower() != "grpc":
            raise ValueError(f"Triton URL {url!r}: unknown scheme {scheme!r} (host:port or grpc://host:port)")
        text = rest
    text = text.rstrip("/")
    if not text or "/" in text or any(c.isspace() for c in text):
        raise ValueError(f"Triton URL {url!r} must look like host:port")
    if text.startswith("["):  # [IPv6]:port
        host, _, tail = text[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ("" if not tail else "bad")
        host = f"[{host}]"
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, ""
    if not host or host == "[]":
        raise ValueError(f"Triton URL {url!r} has no host")
    if not port_text:
        return f"{host}:{DEFAULT_GRPC_PORT}"
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"Triton URL {url!r}: port {port_text!r} must be a number from 1 to 65535")
    return f"{host}:{int(port_text)}"


def split_urls(value: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """URLs from a list, or one string of comma-separated URLs (a YAML or CLI value)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]
