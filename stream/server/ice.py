"""Where a peer connection gathers its ICE candidates.

aiortc gathers host candidates on every address of the machine (aioice's
`get_host_addresses`, loopback left out): a server listening on 127.0.0.1 would still
open UDP sockets on every interface and advertise the machine's other addresses in its
answers. `restrict_gathering` makes one connection gather on the given addresses only.
"""
from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiortc import RTCPeerConnection

WILDCARDS = ("", "0.0.0.0", "::")


def ice_addresses_for(host: str, ice_hosts: Sequence[str] = ()) -> list[str] | None:
    """The addresses a server on `host` gathers candidates on: `ice_hosts` when given,
    else `host`'s own addresses (a name is resolved); None (every interface, aiortc's
    default) for a wildcard host. ValueError for a name that does not resolve."""
    wanted = list(ice_hosts) or [host]
    if any(h in WILDCARDS for h in wanted):
        return None
    addresses: list[str] = []
    for name in wanted:
        try:
            found = [str(ipaddress.ip_address(name))]
        except ValueError:
            try:
                infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_UDP)
            except OSError as exc:
                raise ValueError(f"ICE host {name!r}: cannot resolve it ({exc.strerror or exc})") from exc
            found = [str(info[4][0]) for info in infos]
        addresses += [a for a in found if a not in addresses]
    return addresses


def restrict_gathering(pc: RTCPeerConnection, addresses: Sequence[str] | None) -> None:
    """Make `pc` gather host candidates on `addresses` only (None: leave aiortc's default).

    Call after the transports exist (after setRemoteDescription for an answer, after
    addTrack/addTransceiver for an offer) and before setLocalDescription, which gathers.
    aiortc has no public setting for this: each gatherer's aioice connection gets its own
    `get_component_candidates` that ignores the machine's address list."""
    if addresses is None:
        return
    chosen = list(addresses)
    for connection in _ice_connections(pc):
        if getattr(connection, "_facestream_restricted", False):
            continue
        gather = connection.get_component_candidates

        async def on_chosen(component: int, addresses: list[str], timeout: int = 5,
                            _gather: Any = gather) -> Any:
            return await _gather(component=component, addresses=chosen, timeout=timeout)

        connection.get_component_candidates = on_chosen
        connection._facestream_restricted = True


def _ice_connections(pc: RTCPeerConnection) -> list[Any]:
    transports = []
    for transceiver in pc.getTransceivers():
        transports.append(transceiver.sender.transport or transceiver.receiver.transport)
    if pc.sctp is not None:
        transports.append(pc.sctp.transport)
    found: list[Any] = []
    for dtls in transports:
        if dtls is None:
            continue
        connection = dtls.transport.iceGatherer._connection  # aioice.Connection (aiortc's private name)
        if all(connection is not c for c in found):
            found.append(connection)
    return found
