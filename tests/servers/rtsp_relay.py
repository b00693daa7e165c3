"""A small RTSP relay on GStreamer's RTSP server (Debian: python3-gi, gir1.2-gst-rtsp-server-1.0,
gstreamer1.0-plugins-{base,good,bad}), for the tests. Runs under the system Python.

    /usr/bin/python3 tests/servers/rtsp_relay.py --port 8554 NAME [NAME ...]

For each NAME, a publisher ANNOUNCEs and RECORDs H.264 to rtsp://127.0.0.1:PORT/NAME/push
and any number of readers PLAY rtsp://127.0.0.1:PORT/NAME, getting what is pushed from
the moment they join (SPS/PPS repeated on every keyframe). Prints "ready" once listening.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

CAPS = "video/x-h264,stream-format=byte-stream,alignment=au"
VERBOSE = False


def log(text: str) -> None:
    if VERBOSE:
        print(text, flush=True)


class Channel:
    """What one publisher sends, fanned out to the appsrc of the (shared) play media."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.sources: list[Gst.Element] = []
        self.samples = 0

    def on_sample(self, sink: Gst.Element) -> Gst.FlowReturn:
        sample = sink.emit("pull-sample")
        if sample is None:
            return Gst.FlowReturn.EOS
        buf = sample.get_buffer()
        self.samples += 1
        if self.samples == 1:
            log(f"{self.name}: publisher sending")
        with self.lock:
            targets = list(self.sources)
        if self.samples % 30 == 0:
            log(f"{self.name}: {self.samples} samples, {len(targets)} readers")
        for src in targets:
            out = buf.copy()
            out.pts = out.dts = Gst.CLOCK_TIME_NONE  # appsrc do-timestamp: the reader's clock
            src.emit("push-buffer", out)
        return Gst.FlowReturn.OK

    def record_configured(self, _factory, media) -> None:
        sink = media.get_element().get_by_name("sink")
        sink.connect("new-sample", self.on_sample)

    def play_configured(self, _factory, media) -> None:
        src = media.get_element().get_by_name("src")
        with self.lock:
            self.sources.append(src)
        log(f"{self.name}: reader joined")
        media.connect("unprepared", lambda _m: self._forget(src))

    def _forget(self, src: Gst.Element) -> None:
        with self.lock:
            if src in self.sources:
                self.sources.remove(src)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8554)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("names", nargs="+")
    args = ap.parse_args()
    global VERBOSE
    VERBOSE = args.verbose
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    # Each client in its own thread: a reader's DESCRIBE waits for the publisher's data,
    # which arrives over another client connection (RTP interleaved in its RTSP socket).
    server.get_thread_pool().set_max_threads(16)
    mounts = server.get_mount_points()
    for name in args.names:
        channel = Channel(name)
        record = GstRtspServer.RTSPMediaFactory()
        record.set_transport_mode(GstRtspServer.RTSPTransportMode.RECORD)
        record.set_launch(f"( rtph264depay name=depay0 ! h264parse config-interval=-1 ! {CAPS} ! "
                          "appsink name=sink emit-signals=true sync=false max-buffers=30 drop=true )")
        record.connect("media-configure", channel.record_configured)
        mounts.add_factory(f"/{name}/push", record)
        play = GstRtspServer.RTSPMediaFactory()
        play.set_shared(True)
        play.set_launch(f"( appsrc name=src is-live=true format=time do-timestamp=true caps=\"{CAPS}\" ! "
                        "h264parse config-interval=-1 ! rtph264pay name=pay0 pt=96 config-interval=-1 )")
        play.connect("media-configure", channel.play_configured)
        mounts.add_factory(f"/{name}", play)
    if server.attach(None) == 0:
        print(f"cannot listen on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
        return 1
    loop = GLib.MainLoop()
    signal.signal(signal.SIGTERM, lambda *_: loop.quit())
    signal.signal(signal.SIGINT, lambda *_: loop.quit())
    GLib.timeout_add(200, lambda: True)  # wake the loop so Python signal handlers run
    print("ready", flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
