"""`facestream live --output whep[:[HOST:]PORT]`: the live run's swapped video served to
any number of WHEP viewers (players, OBS's WHEP source, a browser page) from a small
HTTP server of its own, at http://HOST:PORT/whep (the stream is also /whep/live).

The pipeline's sink converts each finished frame once and hands it to a relay; each
viewer's track keeps only the newest frame (see stream.sinks.relay), so a slow viewer
skips frames and never slows the pipeline or the others. The server runs on its own
event loop in a thread, opened with the sink and closed with it.

With `sound` (a live source's sound on its AudioBus: an RTSP camera's, a clip's), a viewer
that offers to receive audio gets it on its own track. Sound and pictures leave on one
clock, their capture times: both captured at t leave at t + D (`PlayoutDelay`): D is the
90th percentile of the pictures' recent latency (capture to this sink), or, when the
source's sound reaches us later than that allows (a camera sends a sound only after
recording it, often after its pictures), how late it comes plus one packet and the
encoder's look-ahead; at most `MAX_VIDEO_HOLD_S`. A picture ready before t + D waits for
it on the server's loop (never in the pipeline's thread). While no viewer takes the
sound, pictures leave as soon as they are ready.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from aiohttp import web

from stream.errors import SinkError, StreamError
from stream.media.audio_delay import AudioBus, PlayoutDelay
from stream.media.clock import VIDEO_TIME_BASE
from stream.media.convert import YuvFramer
from stream.ops.listen import bind_socket
from stream.runtime.slot import Slot
from stream.server.guard import ConnectionBook, ConnectionLimits, GuardedSite
from stream.server.ice import ice_addresses_for
from stream.server.peer import CONNECT_TIMEOUT_S
from stream.server.signalling import MAX_VIEWERS, media_middleware
from stream.server.viewer import Viewer
from stream.server.whep import WhepEndpoints
from stream.sinks.relay import FrameRelay
from stream.sinks.webrtc_sound import ENCODER_AHEAD_S, PACKET_S, SoundFeed

log = logging.getLogger(__name__)

STREAM = "live"
DEFAULT_PORT = 8080
MAX_VIDEO_HOLD_S = 0.5  # pictures are never held longer for their sound (sound later than this is late)


def parse_whep_output(spec: str) -> tuple[str, int] | None:
    """(host, port) of a `whep[:[HOST:]PORT]` output, None when `spec` is not one;
    ValueError (one line) for a malformed one."""
    if spec != "whep" and not spec.startswith("whep:"):
        return None
    rest = spec[5:]
    host, _, port = rest.rpartition(":")
    if not port:
        return "127.0.0.1", DEFAULT_PORT
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--output {spec!r}: expected whep, whep:PORT or whep:HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


class WhepOutput:
    """A live sink that serves its frames to WHEP viewers."""

    def __init__(self, width: int, height: int, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 token: str | None = None, codec: str = "vp8", max_viewers: int = MAX_VIEWERS,
                 connect_timeout: float = CONNECT_TIMEOUT_S, say: Callable[[str], None] | None = None,
                 sound: AudioBus | None = None) -> None:
        self.host, self.port = host, port
        self.token = token
        self.codec = codec
        self.max_viewers = max_viewers
        self.connect_timeout = connect_timeout
        self.say = say or (lambda line: None)
        self.ice_addresses = ice_addresses_for(host)
        self.relay = FrameRelay()
        self.framer = YuvFramer(width, height)
        self.viewers: dict[str, Viewer] = {}
        self.frames_written = 0
        self.latency_s = 0.0  # of the last frame written (capture to this sink)
        self.sound = sound
        self.video_hold_s = 0.0  # how long the last picture was held back for its sound
        self.playout = PlayoutDelay(MAX_VIDEO_HOLD_S)
        if sound is not None and sound.format is not None:  # the source has sound
            self.relay.sound = SoundFeed(sound, self.delay_s)
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return f"WHEP {self.url or f'http://{self.host}:{self.port}/'}whep"

    # -- what WhepEndpoints needs ---------------------------------------------------

    def relay_of(self, stream: str) -> FrameRelay | None:
        return self.relay if stream == STREAM else None

    async def end_viewer(self, viewer_id: str) -> None:
        viewer = self.viewers.pop(viewer_id, None)
        if viewer is not None:
            await viewer.close()

    def delay_s(self) -> float:
        """D: from capture to leaving, for pictures and sound alike (see the module's text);
        the last frame's latency while nobody listens to the sound."""
        sound = self.sound
        if sound is None or not sound.listeners:
            return self.latency_s
        late = sound.lateness()
        self.playout.at_least = -1.0 if late is None else late + PACKET_S + ENCODER_AHEAD_S
        return self.playout.seconds()

    # -- the sink -------------------------------------------------------------------

    def open(self) -> None:
        """Listen (a SinkError, one line, when the port cannot be bound) and serve."""
        if self._thread is not None:
            return
        try:
            sock = bind_socket(self.host, self.port)
        except StreamError as exc:
            raise SinkError(str(exc).replace("serve:", "--output whep:", 1)) from exc
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failed: list[BaseException] = []

        async def start() -> None:
            app = web.Application(middlewares=[media_middleware(self.token)])
            WhepEndpoints(self, default_stream=STREAM).add_routes(app)
            limits = ConnectionLimits()
            runner = web.AppRunner(app, access_log=None, keepalive_timeout=limits.keepalive_timeout)
            await runner.setup()
            await GuardedSite(runner, sock, ConnectionBook(limits)).start()
            self._runner = runner
            bound = sock.getsockname()[1]
            shown = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
            self.url = f"http://{shown}:{bound}/"

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(start())
            except BaseException as exc:  # noqa: BLE001 - said by open() in the caller's thread
                failed.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="fs-whep-output", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failed:
            sock.close()
            self._thread = None
            raise SinkError(f"--output whep: cannot serve on {self.host}:{self.port} ({failed[0]})")

    async def _shutdown(self) -> None:
        await asyncio.gather(*(self.end_viewer(v) for v in list(self.viewers)))
        if self._runner is not None:
            await self._runner.cleanup()

    def write(self, slot: Slot) -> None:
        frame = self.framer(slot.image)  # reused: the relay copies what it keeps
        frame.pts = slot.pts
        frame.time_base = slot.time_base or VIDEO_TIME_BASE
        self.frames_written += 1
        if not slot.capture_time:
            self.relay.publish(frame)
            return
        now = time.monotonic()
        self.latency_s = max(0.0, now - slot.capture_time)
        self.playout.frame(self.latency_s)
        due = slot.capture_time + self.delay_s()
        loop = self._loop
        if due - now < 0.001 or loop is None:
            self.video_hold_s = 0.0
            self.relay.publish(frame)
            return
        picture = self.relay.prepare(frame)
        self.video_hold_s = due - now
        if picture is not None:
            try:
                loop.call_soon_threadsafe(loop.call_at, due, self.relay.deliver, picture)
            except RuntimeError:  # the server stopped
                pass

    def close(self) -> None:
        self.relay.close()
        thread, loop = self._thread, self._loop
        self._thread = None
        if thread is None or loop is None:
            return
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:  # already closed
            pass
        thread.join(15)
        if thread.is_alive():
            log.warning("%s: the server did not stop within 15 s", self.name)
