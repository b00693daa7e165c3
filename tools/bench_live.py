"""Live behaviour under real-time input: a generated 1280x720 30 fps clip, paced as a
camera would deliver it, through the live pipeline (drop-oldest rings, adaptive detection)
to a virtual-camera sink (pyvirtualcam's backend registry with a backend that discards,
so the I420 conversion a real loopback device needs is still paid).

Once more through WebRTC on loopback (`--via webrtc`): `facestream serve`'s server and an
aiortc client in this process; the client sends the clip as its camera (VP8, as a browser
would) and receives the swapped video back. Each frame it sends carries its number in a
corner (16 px blocks, which survive the codec), so the client also measures the round trip:
sent -> encoded -> server -> swapped -> encoded -> received and decoded. Both peers' codecs
run on this machine's CPU beside the pipeline.

Prints, per clip and path: fps in and out, drops, capture-to-sink latency p50/p95 (for
WebRTC: from the frame's arrival at the server to its hand-over to the sending track), the
per-frame processing time (the mean time of analyse + swap + composite + sink for one
frame), and the target: p95 latency <= processing + two frame intervals (no standing queue).
Beside each WebRTC path, its A/V offset: the same server, the same path, a camera and a
microphone playing the flash-and-beep clip (320x240: an aiortc client here cannot encode
1280x720 in real time beside the server, and a client whose pictures fall behind its own
sound measures itself) for `--sync-seconds`; the median beep onset minus flash as the
client (and the WHEP viewer) receive them, timed by packet arrival (tools/webrtc_sync).

    python tools/bench_live.py                  # one face and six faces, 10 s each, both paths
    python tools/bench_live.py --faces 1 --seconds 20 --via webrtc --config quality
    python tools/bench_live.py --faces 1 --via whip   # WHIP publisher + WHEP viewer: first frame, round trips
    python tools/bench_live.py --via rtsp             # an RTSP camera with sound -> RTSP out and WHEP

`--engine neural` runs the neural engine on the cost-equivalent models (tools/cost_models.py;
built into a temporary folder unless `--models-dir` holds them, INT8 twins included where
`facestream models quantize` made them there): inswapper_128, w600k_r50 and det_10g at the
real models' cost. Their random weights find no faces, so the detector pays det_10g's cost
on each detection and takes its boxes from dlib's HOG detector (so a detection costs more than
the real model's would); the landmarks are dlib's (2dfan4 on every third frame alone would
take 40-90 ms a frame on 2 cores). Each face is swapped as often as the worker beside the
frame path can (`models.swap_every auto`, live's default for the neural engine) and carried
between; the line gives the swap rate reached.

    python tools/bench_live.py --engine neural --faces 1 --via vcam --models-dir /tmp/cost --precision fp32

`--via rtsp` needs GStreamer's RTSP server for the system Python (tests/fixtures/rtsp_relay.py,
`make test-deps`): a camera with a microphone (the flash-and-beep clip, H.264 + Opus, real
time) publishes to it; the camera read directly gives the input's own A/V offset; `live`
then swaps it and publishes it back (RTSP out, read by FFmpeg's RTSP client), and once more
as `live --output whep` (an aiortc WHEP viewer); each line gives the run's latency and the
A/V offset its reader measured.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import av  # noqa: E402
import cv2  # noqa: E402
import numpy as np  # noqa: E402
import pyvirtualcam  # noqa: E402

from stream.config import load_config  # noqa: E402
from stream.job.runs import run_live  # noqa: E402
from stream.job.swap_job import SwapJob  # noqa: E402
from stream.media.demo_clips import astronaut, bench_clips  # noqa: E402
from stream.runtime.heap import bound_arenas  # noqa: E402
from stream.runtime.metrics import format_cadence  # noqa: E402
from stream.server.client import PacedTrack  # noqa: E402
from stream.sinks.fanout import FanoutSink  # noqa: E402
from stream.sinks.vcam import VirtualCameraSink  # noqa: E402
from stream.sources.open import open_source  # noqa: E402
from tools.live_targets import p95_bound_ms, processing_ms  # noqa: E402
from tools.webrtc_sync import flash_beep_tracks, read_webrtc_sync  # noqa: E402


class DiscardingCamera:
    """A virtual camera that drops what it is sent (no loopback device on this machine)."""

    def __init__(self, *, width: int, height: int, fps: float, fourcc: int, device: str | None, **kw) -> None:
        self.fourcc = fourcc

    def send(self, frame: np.ndarray) -> None:
        pass

    def close(self) -> None:
        pass

    def device(self) -> str:
        return "discard"

    def native_fourcc(self) -> int:
        return self.fourcc


class CostedDetector:
    """det_10g's cost stand-in run on each detection for its cost, dlib's boxes returned."""

    def __init__(self, costly, finder) -> None:
        self.costly = costly
        self.finder = finder
        self.name = "det_10g cost + dlib boxes"

    @property
    def calls(self) -> int:
        return self.costly.calls

    def open(self) -> None:
        self.costly.open()
        self.finder.open()

    def forward(self, frame):
        self.costly.forward(frame)
        return self.finder.forward(frame)


def neural_job(args: argparse.Namespace, source: str, tmp: str) -> SwapJob:
    """A job of the neural engine on the cost-equivalent models, its detector paying
    det_10g's cost and placing faces where dlib finds them."""
    from engines.dlib.detector import DlibHogDetector
    from tools.cost_models import build_all

    folder = args.models_dir
    if folder is None:
        folder = str(Path(tmp) / "cost")
        build_all(folder, ["det_10g.onnx", "w600k_r50.onnx", "inswapper_128.onnx"])
    overrides = [*args.overrides, "engine=neural", f"models.dir={json.dumps(folder)}", "models.landmarker=null",
                 f"models.precision={args.precision}"]
    job = SwapJob(load_config(args.config, overrides), [source])
    job.open()
    cfg = job.config.detect
    job.models.detector = CostedDetector(job.models.detector, DlibHogDetector(
        cfg.max_side, cfg.upsample, max_upscale=cfg.max_upscale, refine=cfg.refine))
    job.models.detector.open()
    return job


def run(job: SwapJob, clip: str) -> dict:
    source = open_source(clip)
    info = source.open()
    sink = VirtualCameraSink(info.width, info.height, float(info.rate), backend="bench-discard")
    return run_live(job, source, FanoutSink([sink]), "vcam").report


MARK_BITS, MARK_BLOCK = 12, 16  # frame number in the top-left corner: 12 blocks of 16x16 px


def stamp(frame, number: int):
    """The decoded clip frame as a new yuv420p frame with `number` drawn into its luma."""
    yuv = frame.to_ndarray(format="yuv420p")
    for bit in range(MARK_BITS):
        x = bit * MARK_BLOCK
        yuv[:MARK_BLOCK, x:x + MARK_BLOCK] = 235 if number >> bit & 1 else 16
    return av.VideoFrame.from_ndarray(yuv, format="yuv420p")


def read_stamp(frame) -> int:
    luma = frame.to_ndarray(format="yuv420p")[:MARK_BLOCK]
    half = MARK_BLOCK // 2
    return sum(1 << bit for bit in range(MARK_BITS)
               if luma[half, bit * MARK_BLOCK + half] > 125)


class ClipTrack(PacedTrack):
    """The clip as a camera track, paced at its frame rate, each frame numbered, each
    send time kept (by number) for the round trip."""

    def __init__(self, clip: str, fps: float = 30.0) -> None:
        super().__init__(fps=fps)
        self.container = av.open(clip)
        self.decoded = self.container.decode(video=0)
        self.sent_at: list[float] = []

    def frame_at(self, n: int):
        try:
            frame = stamp(next(self.decoded), n)
        except StopIteration:
            self.container.close()
            return None
        self.sent_at.append(time.monotonic())
        return frame


def run_webrtc(job: SwapJob, clip: str) -> dict:
    """The clip through `facestream serve`'s server from an aiortc client, on loopback."""
    import aioice.ice

    from stream.server.app import FaceServer, start_server
    from stream.server.client import call_server

    # Loopback only: candidates on 127.0.0.1 whatever interfaces this machine has.
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]

    async def main() -> dict:
        server = FaceServer(job)
        server.add_job_faces()
        runner, url = await start_server(server, "127.0.0.1", 0)
        track = ClipTrack(clip)
        pc, sid, remote = await call_server(url, track)
        session = server.sessions[sid]
        back = await asyncio.wait_for(remote, 30)
        trips: list[float] = []
        received = 0
        while True:
            # Once the clip has ended, what is still in flight arrives within half a second.
            wait = 0.5 if track.readyState == "ended" else 5.0
            try:
                frame = await asyncio.wait_for(back.recv(), wait)
            except (asyncio.TimeoutError, Exception):  # nothing more comes back
                break
            received += 1
            n = read_stamp(frame)
            if n < len(track.sent_at):
                trips.append(time.monotonic() - track.sent_at[n])
        await pc.close()
        await server.close()
        await runner.cleanup()
        rep = dict(session.report or {})
        rep["webrtc"] = {"codec": session.codec, "sent": len(track.sent_at), "received": received,
                         "round_trip_ms": {q: round(float(np.percentile(np.asarray(trips) * 1000, v)), 1)
                                           for q, v in (("p50", 50), ("p95", 95))} if trips else None}
        return rep

    return asyncio.run(main())


def run_whip(job: SwapJob, clip: str) -> dict:
    """The clip published through WHIP (sendrecv: the swapped video comes back on the same
    connection) and watched by one WHEP viewer, both standard aiortc clients on loopback.
    Round trips are from the publisher's send to each client's decoded frame; the first
    frame is timed from the POST."""
    import aioice.ice

    from stream.server.app import FaceServer, start_server
    from stream.server.whip_client import whep_view, whip_publish

    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]

    async def main() -> dict:
        server = FaceServer(job)
        server.add_job_faces()
        runner, url = await start_server(server, "127.0.0.1", 0)
        track = ClipTrack(clip)
        t0 = time.monotonic()
        publisher = await whip_publish(f"{url}whip", track)
        sid = publisher.location.rstrip("/").split("/")[-2]
        session = server.sessions[sid]
        back = await asyncio.wait_for(publisher.remote, 30)
        first = await asyncio.wait_for(back.recv(), 30)
        first_s = time.monotonic() - t0
        t1 = time.monotonic()
        viewer = await whep_view(f"{url}whep/{sid}")
        watched = await asyncio.wait_for(viewer.remote, 30)
        await asyncio.wait_for(watched.recv(), 30)
        viewer_first_s = time.monotonic() - t1
        trips: dict[str, list[float]] = {"whip": [], "whep": []}
        counts = {"whip": 1, "whep": 1}

        async def drain(name: str, remote) -> None:
            while True:
                wait = 0.5 if track.readyState == "ended" else 5.0
                try:
                    frame = await asyncio.wait_for(remote.recv(), wait)
                except (asyncio.TimeoutError, Exception):  # nothing more comes back
                    return
                counts[name] += 1
                n = read_stamp(frame)
                if n < len(track.sent_at):
                    trips[name].append(time.monotonic() - track.sent_at[n])

        del first
        await asyncio.gather(drain("whip", back), drain("whep", watched))
        await viewer.close()
        await publisher.close()
        await server.close()
        await runner.cleanup()
        rep = dict(session.report or {})
        rep["webrtc"] = {"codec": session.codec, "sent": len(track.sent_at), "received": counts["whip"],
                         "round_trip_ms": _percentiles(trips["whip"])}
        rep["whip"] = {"first_frame_s": round(first_s, 2), "viewer_first_frame_s": round(viewer_first_s, 2),
                       "viewer_received": counts["whep"], "viewer_round_trip_ms": _percentiles(trips["whep"])}
        return rep

    return asyncio.run(main())


def run_sync(job: SwapJob, via: str, seconds: float) -> dict:
    """The flash-and-beep clip through `via` ("webrtc": the page's JSON offer; "whip": a WHIP
    publisher taking its video and sound back, and a WHEP viewer asking for sound): the
    A/V offset each receiving client measures."""
    import aioice.ice

    from stream.server.app import FaceServer, start_server
    from stream.server.client import open_session
    from stream.server.whip_client import whep_view, whip_publish

    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]

    async def read(call) -> dict | None:
        video = await asyncio.wait_for(call.remote, 30)
        audio = await asyncio.wait_for(call.remote_audio, 30)
        return _offset((await read_webrtc_sync(call.pc, video, audio, seconds)).offsets(skip_s=1.0))

    async def main() -> dict:
        server = FaceServer(job)
        server.add_job_faces()
        runner, url = await start_server(server, "127.0.0.1", 0)
        camera, microphone = flash_beep_tracks()
        calls = []
        try:
            if via == "whip":
                publisher = await whip_publish(f"{url}whip", camera, audio=microphone)
                sid = publisher.location.rstrip("/").split("/")[-2]
                calls = [publisher, await whep_view(f"{url}whep/{sid}", audio=True)]
                back, viewer = await asyncio.gather(*(read(c) for c in calls))
                return {"av_offset": back, "viewer_av_offset": viewer}
            call = await open_session(url, camera, audio=microphone)
            calls = [call]
            return {"av_offset": await read(call)}
        finally:
            for call in reversed(calls):
                await call.pc.close()
            await server.close()
            await runner.cleanup()

    return asyncio.run(main())


def run_rtsp(job: SwapJob, seconds: float) -> dict:
    """The flash-and-beep camera (RTSP, with sound) read directly, through `live` to RTSP out,
    and through `live --output whep`: each reader's A/V offset and each run's latency."""
    import threading

    import aioice.ice

    from stream.server.whep_output import WhepOutput
    from stream.server.whip_client import whep_view
    from stream.sinks.open import open_sink
    from stream.sources.rtsp import RtspSource
    from tools.av_sync import FlashBeepPublisher, read_rtsp_sync
    from tools.relay import start_relay

    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]
    relay, port = start_relay("cam", "out", audio=True)
    url = f"rtsp://127.0.0.1:{port}/"
    publisher = FlashBeepPublisher(url + "cam/push")
    publisher.start()
    out: dict = {}
    try:
        out["camera_av_offset"] = _offset(read_rtsp_sync(url + "cam", seconds).offsets(skip_s=1.0))

        source = RtspSource(url + "cam")
        info = source.open()
        sink = open_sink(url + "out/push", info, job.config, sound=source.audio)
        got: dict = {}
        reader = threading.Thread(target=lambda: got.update(r=read_rtsp_sync(url + "out", seconds)), daemon=True)
        reader.start()
        rep = run_live(job, source, FanoutSink([sink]), "rtsp out", duration=seconds + 5).report
        reader.join(30)
        out["rtsp_out"] = {"latency": rep["latency"],
                           "av_offset": _offset(got["r"].offsets(skip_s=1.0)) if "r" in got else None}

        source = RtspSource(url + "cam")
        info = source.open()
        whep = WhepOutput(info.width, info.height, port=0, sound=source.audio)
        whep.open()
        done: dict = {}
        runner = threading.Thread(target=lambda: done.update(rep=run_live(job, source, FanoutSink([whep]), "whep",
                                                                          duration=seconds + 6).report))
        runner.start()

        async def watch() -> dict | None:
            viewer = await whep_view(f"{whep.url}whep", audio=True)
            try:
                video = await asyncio.wait_for(viewer.remote, 30)
                audio = await asyncio.wait_for(viewer.remote_audio, 30)
                return _offset((await read_webrtc_sync(viewer.pc, video, audio, seconds)).offsets(skip_s=1.0))
            finally:
                await viewer.close()

        offset = asyncio.run(watch())
        runner.join(60)
        out["whep"] = {"latency": done["rep"]["latency"], "av_offset": offset,
                       "video_hold_ms": round(whep.video_hold_s * 1000, 1)}
    finally:
        publisher.stop()
        relay.kill()
        relay.wait(5)
    return out


def report_rtsp(rep: dict) -> None:
    print(f"{'RTSP camera':>16}: read directly{_sync(rep['camera_av_offset'])}")
    for key, name in (("rtsp_out", "-> RTSP out"), ("whep", "-> WHEP viewer")):
        lat = rep[key]["latency"]
        print(f"{name:>16}: latency p50 {lat['p50_ms']:.0f} ms p95 {lat['p95_ms']:.0f} ms"
              f"{_sync(rep[key]['av_offset'])}", flush=True)


def _offset(offsets: list[float]) -> dict | None:
    """Beep minus flash (ms) over the flashes read: median and extremes."""
    if not offsets:
        return None
    ms = np.asarray(offsets) * 1000
    return {"median_ms": round(float(np.median(ms)), 1), "min_ms": round(float(ms.min()), 1),
            "max_ms": round(float(ms.max()), 1), "flashes": int(ms.size)}


def _sync(offset: dict | None) -> str:
    if offset is None:
        return "; A/V offset: not measured"
    return (f"; A/V offset (beep - flash, flash-and-beep clip) median {offset['median_ms']:+.0f} ms "
            f"[{offset['min_ms']:+.0f}, {offset['max_ms']:+.0f}] over {offset['flashes']} flashes")


def _percentiles(seconds: list[float]) -> dict | None:
    if not seconds:
        return None
    ms = np.asarray(seconds) * 1000
    return {q: round(float(np.percentile(ms, v)), 1) for q, v in (("p50", 50), ("p95", 95))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faces", choices=["1", "6", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--via", choices=["vcam", "webrtc", "whip", "rtsp", "both"], default="both",
                    help="to a virtual camera, through WebRTC on loopback, or both (default); whip: "
                         "published through WHIP (swapped video back) and watched by a WHEP viewer; "
                         "rtsp: an RTSP camera with sound to RTSP out and to a WHEP viewer (A/V offsets)")
    ap.add_argument("--config", default="fast", help="preset (default: fast)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                    help="override a config field, e.g. --set detect.background=false (repeatable)")
    ap.add_argument("--sync-seconds", type=float, default=6.0,
                    help="how long each WebRTC path's A/V offset is read (0: not measured; default 6)")
    ap.add_argument("--json", metavar="PATH", help="also write the reports as JSON")
    ap.add_argument("--engine", choices=["preset", "neural"], default="preset",
                    help="preset: the preset's engine (default); neural: the neural engine on the cost-equivalent "
                         "models, swapped at a cadence and carried between (see above)")
    ap.add_argument("--models-dir", metavar="DIR", help="--engine neural: the cost-equivalent models (default: built)")
    ap.add_argument("--precision", choices=["auto", "fp32", "int8"], default="auto",
                    help="--engine neural: which files run (models.precision; int8 needs their INT8 twins)")
    args = ap.parse_args()
    bound_arenas()  # as `facestream live` does before its threads (stream/runtime/heap.py)
    pyvirtualcam.register_backend("bench-discard", DiscardingCamera)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        source = str(Path(tmp) / "astronaut.png")
        cv2.imwrite(source, astronaut())
        if args.engine == "neural":
            job = neural_job(args, source, tmp)
        else:
            job = SwapJob(load_config(args.config, args.overrides), [source])
            job.open()
        if args.via == "rtsp":
            results["rtsp"] = run_rtsp(job, args.sync_seconds or 6.0)
            report_rtsp(results["rtsp"])
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
            return 0
        clips = bench_clips(tmp, args.faces, args.seconds)
        if args.via != "vcam":
            job.share()  # the server's peers share the models, as in `facestream serve`
        print(f"1280x720 30 fps clip paced in real time -> virtual camera (discarding) and/or a WebRTC "
              f"peer on loopback; preset {args.config}")
        paths = ["vcam", "webrtc"] if args.via == "both" else [args.via]
        for name, clip in clips:
            for via in paths:
                rep = run(job, clip) if via == "vcam" else run_whip(job, clip) if via == "whip" \
                    else run_webrtc(job, clip)
                if via != "vcam" and args.sync_seconds > 0:
                    sync = run_sync(job, via, args.sync_seconds)
                    rep["webrtc"]["av_offset"] = sync["av_offset"]
                    if "whip" in rep:
                        rep["whip"]["viewer_av_offset"] = sync.get("viewer_av_offset")
                results[name if via == "vcam" else f"{name} via {via}"] = rep
                report(f"{name} via {via}", rep)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def report(name: str, rep: dict) -> None:
    processing, bound = processing_ms(rep), p95_bound_ms(rep)
    lat = rep["latency"]
    line = (f"{name:>16}: in {rep['frames_in'] / rep['elapsed_s']:.1f} fps, out {rep['fps']:.1f} fps, "
            f"drops {rep['drops']} of {rep['frames_in']}; latency p50 {lat['p50_ms']:.0f} ms "
            f"p95 {lat['p95_ms']:.0f} ms; processing {processing:.0f} ms/frame; "
            f"target p95 <= {bound:.0f} ms: {'met' if lat['p95_ms'] <= bound else 'NOT met'}; "
            f"detection every {rep['live']['detect_every_base']}-{rep['live']['detect_every_max']}")
    cad = rep.get("cadence")
    if cad:
        line += (f"; {format_cadence(cad['swapper'], cad['swaps_per_s_a_face'])} "
                 f"({cad['swaps']} swaps; worker slowed {rep['live'].get('swaps_slowed', 0)} steps)")
    web = rep.get("webrtc")
    if web:
        trip = web["round_trip_ms"]
        line += (f"\n{'':>16}  {web['codec']}: client sent {web['sent']}, got {web['received']} back; "
                 + (f"round trip p50 {trip['p50']:.0f} ms p95 {trip['p95']:.0f} ms" if trip else "no round trip")
                 + (_sync(web["av_offset"]) if "av_offset" in web else ""))
    whip = rep.get("whip")
    if whip:
        trip = whip["viewer_round_trip_ms"]
        line += (f"\n{'':>16}  first frame back {whip['first_frame_s']:.2f} s after the WHIP POST; WHEP viewer: "
                 f"first frame {whip['viewer_first_frame_s']:.2f} s after its POST, got {whip['viewer_received']}, "
                 + (f"publisher-to-viewer p50 {trip['p50']:.0f} ms p95 {trip['p95']:.0f} ms" if trip else "no trip")
                 + (_sync(whip["viewer_av_offset"]) if "viewer_av_offset" in whip else ""))
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
