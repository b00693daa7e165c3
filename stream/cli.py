"""The `facestream` command: swap a face into a video or a picture, or run the demo."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from engines.errors import EngineError
from stream.config import BLENDS, SELECT_MODES, Config, load_config
from stream.errors import StreamError
from stream.metrics import format_report, write_json
from stream.pipeline import JobResult, SwapJob, is_image_path
from stream.progress import Progress

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130

log = logging.getLogger("facestream")


class CliError(Exception):
    """A usage problem found after parsing (e.g. a mapping entry without '=')."""


def _add_run_options(p: argparse.ArgumentParser, server: bool = False) -> None:
    """The configuration and reporting options of a run; `server`: only those that apply
    to `serve` (no reference photos, no output encoding, no run report)."""
    g = p.add_argument_group("configuration")
    g.add_argument("--config", metavar="NAME|PATH",
                   help="preset from configs/ (fast, quality) or a YAML file; flags below override it")
    g.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override any config field, e.g. --set detect.every=5 (repeatable)")
    g.add_argument("--engine", choices=["auto", "dlib", "neural"],
                   help="model family: neural (SCRFD, ArcFace, inswapper files you supply), dlib (the "
                        "embedded default), or auto (default): neural when its files are found")
    g.add_argument("--models-dir", metavar="DIR",
                   help="folder of the neural model files (searched before $FACESTREAM_MODELS and "
                        "the per-user folder; see `facestream models`)")
    if server:  # every browser brings its own faces: no reference photos here
        g.add_argument("--select", choices=["all", "largest"],
                       help="which faces of each camera to swap: all (default) or the largest")
        p.set_defaults(reference=None, mapping=[], x264_preset=None, crf=None, serial=False, stats_json=None)
    else:
        _add_selection_options(g)
    g.add_argument("--blend", choices=BLENDS, help="feather: soft alpha edge (fast); poisson: seamless clone")
    g.add_argument("--detect-every", type=int, metavar="N", help="run face detection every N frames")
    g.add_argument("--enhance", action="store_true",
                   help="restore the swapped faces with GFPGAN 1.4 (its file is needed: see `facestream models`)")
    g.add_argument("--enhance-every", type=int, metavar="K",
                   help="with --enhance: run it every K-th frame per face, re-pasting its last result between")
    g.add_argument("--max-faces", type=int, metavar="N", help="swap at most N faces per frame")
    o = p.add_argument_group("reporting")
    if not server:
        g.add_argument("--x264-preset", metavar="PRESET", help="libx264 preset of the output (ultrafast ... veryslow)")
        g.add_argument("--crf", type=int, help="libx264 quality, 0-51 (lower is better; default 20)")
        g.add_argument("--serial", action="store_true",
                       help="run every stage on one thread (for comparison; staged threads are the default)")
        o.add_argument("--stats-json", metavar="PATH", help="also write the run's figures as JSON")
    o.add_argument("-q", "--quiet", action="store_true",
                   help="no line per peer" if server else "no progress bar and no summary table")
    o.add_argument("-v", "--verbose", action="store_true", help="debug logging, with tracebacks")


def _add_selection_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--select", choices=SELECT_MODES,
                   help="which faces to swap: all (default), the largest, only the --reference person, "
                        "or a --map of sources to people")
    g.add_argument("--reference", metavar="PHOTO", help="with --select reference: a photo of the person to swap")
    g.add_argument("--map", dest="mapping", action="append", default=[], metavar="SOURCE=REFERENCE",
                   help="with --select mapping: put SOURCE's face on the person in REFERENCE (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="facestream",
        description="Swap a source face into videos and pictures, in real time, on a CPU.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    swap = sub.add_parser(
        "swap", help="swap the source face into a video or a picture",
        description="Replace the faces of INPUT (a video or a picture) with the face in the --source "
                    "photo and write OUTPUT. Videos keep their frame count, timing and audio.")
    swap.add_argument("--source", action="append", default=[], metavar="PHOTO",
                      help="photo of the face to put in (its largest face is used)")
    swap.add_argument("--input", "-i", required=True, metavar="PATH", help="video (.mp4, .mkv, ...) or picture")
    swap.add_argument("--output", "-o", required=True, metavar="PATH",
                      help="where to write the result (.mp4/.mkv/.mov for videos, .png/.jpg for pictures)")
    _add_run_options(swap)
    demo = sub.add_parser(
        "demo", help="build a demo clip from installed pictures, swap it, write a contact sheet",
        description="Builds a 1280x720 30 fps clip of six faces (insightface's t1.jpg, panned and "
                    "zoomed), swaps in scikit-image's astronaut, and writes the video and a "
                    "before/after contact sheet. Needs nothing but the pip install.")
    demo.add_argument("--out-dir", default="facestream-demo", metavar="DIR",
                      help="folder for the demo files (default: ./facestream-demo)")
    demo.add_argument("--seconds", type=float, default=10.0, help="length of the demo clip (default 10)")
    _add_run_options(demo)
    live = sub.add_parser(
        "live", help="swap faces in a live stream: webcam or RTSP in; virtual camera, RTSP or a window out",
        description="Runs the pipeline on a live INPUT with latest-frame semantics (a slow stage "
                    "drops the oldest frames instead of queueing them) and sends the result to "
                    "OUTPUT. Prints fps in/out, drops and capture-to-sink latency every second and "
                    "a summary at the end. Ctrl-C stops cleanly.",
        epilog="examples:\n"
               "  facestream live --source face.jpg --input webcam:0 --output vcam\n"
               "  facestream live --source face.jpg --input rtsp://cam/stream --output rtsp://server/swapped\n"
               "  facestream live --source face.jpg --input webcam:0 --output preview --record session.mp4",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    live.add_argument("--source", action="append", default=[], metavar="PHOTO",
                      help="photo of the face to put in (its largest face is used)")
    live.add_argument("--input", "-i", required=True, metavar="INPUT",
                      help="webcam:N (or webcam:/dev/videoN), rtsp://..., or a video file played in real time")
    live.add_argument("--output", "-o", default="preview", metavar="OUTPUT",
                      help="vcam (virtual camera), rtsp://server/path (publish), preview (a window; "
                           "default), or a file")
    live.add_argument("--record", metavar="FILE", help="also write the swapped stream to FILE (.mp4, .mkv)")
    live.add_argument("--size", metavar="WxH", help="webcam: ask for this picture size (e.g. 1280x720)")
    live.add_argument("--fps", type=float, help="webcam: ask for this frame rate")
    live.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this many seconds")
    live.add_argument("--open-timeout", type=float, default=10.0, metavar="SECONDS",
                      help="rtsp: give up connecting after this long (default 10)")
    live.add_argument("--vcam-device", metavar="DEVICE", help="virtual camera device (e.g. /dev/video10)")
    live.add_argument("--vcam-backend", metavar="NAME", help="pyvirtualcam backend (default: the platform's)")
    _add_run_options(live)
    serve = sub.add_parser(
        "serve", help="a WebRTC page: your browser's camera, swapped, sent back to the page",
        description="Starts a web server (aiohttp + aiortc) with one page: choose or upload the "
                    "source face, start the camera, and watch the swapped video with live figures "
                    "(fps, latency, drops). Each browser gets its own pipeline; the models are "
                    "loaded once. Ctrl-C stops the server.",
        epilog="examples:\n"
               "  facestream serve --source face.jpg              # then open http://127.0.0.1:8080\n"
               "  facestream serve --source a.jpg --source b.jpg  # both offered on the page\n"
               "  facestream serve --host 0.0.0.0 --port 9000     # other machines too (browsers allow\n"
               "                                                  # the camera on https or localhost only)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--source", action="append", default=[], metavar="PHOTO",
                       help="a face offered on the page (repeatable; default: scikit-image's astronaut); "
                            "the page can upload more")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    serve.add_argument("--max-peers", type=int, default=4, metavar="N",
                       help="browsers served at once (default 4); each runs its own pipeline")
    serve.add_argument("--codec", choices=["vp8", "h264", "auto"], default="vp8",
                       help="video codec to send back when the browser offers it (default vp8: the "
                            "cheapest on a CPU here; auto: the browser's first choice)")
    _add_run_options(serve, server=True)
    models = sub.add_parser(
        "models", help="list the standard model files (found or missing), or fetch one",
        description="Lists each model of the catalog with the file that was found, or where to put "
                    "it. Folders searched: --models-dir, then $FACESTREAM_MODELS, then the per-user "
                    "folder. `models fetch NAME --url URL` downloads one (nothing is ever downloaded "
                    "unless asked).")
    models.add_argument("--models-dir", metavar="DIR", help="search (and fetch into) this folder first")
    msub = models.add_subparsers(dest="models_command", metavar="ACTION")
    fetch = msub.add_parser("fetch", help="download a model file, verifying its sha256 when given")
    fetch.add_argument("name", help="catalog name, e.g. inswapper_128")
    fetch.add_argument("--url", required=True, help="where to download it from")
    fetch.add_argument("--sha256", metavar="HEX", help="expected sha256 of the file")
    fetch.add_argument("--models-dir", dest="fetch_dir", metavar="DIR",
                       help="folder to save into (default: --models-dir, else the per-user folder)")
    return parser


def _config_from(args: argparse.Namespace) -> Config:
    overrides = list(args.overrides)
    simple = {
        "engine": args.engine, "select.mode": args.select, "swap.blend": args.blend,
        "detect.every": args.detect_every, "pipeline.max_faces": args.max_faces,
        "encode.preset": args.x264_preset, "encode.crf": args.crf, "models.dir": args.models_dir,
        "enhance.every": args.enhance_every, "enhance.enabled": True if args.enhance else None,
    }
    overrides += [f"{k}={json.dumps(v)}" for k, v in simple.items() if v is not None]
    if args.reference:
        overrides.append(f"select.reference={json.dumps(args.reference)}")
    if args.mapping:
        pairs = []
        for item in args.mapping:
            src, sep, ref = item.partition("=")
            if not sep or not src or not ref:
                raise CliError(f"--map {item!r} must look like SOURCE=REFERENCE")
            pairs.append([src, ref])
        overrides.append(f"select.mapping={json.dumps(pairs)}")
    if args.serial:
        overrides.append("pipeline.staged=false")
    return load_config(args.config, overrides)


def _job_for(config: Config, sources: list[str]) -> SwapJob:
    if config.select.mode == "mapping":
        srcs = [p[0] for p in config.select.mapping]
        refs = [p[1] for p in config.select.mapping]
        return SwapJob(config, srcs, refs)
    if not sources:
        raise CliError("--source PHOTO is required (or --select mapping with --map SOURCE=REFERENCE)")
    if len(sources) > 1:
        raise CliError("several --source photos need --select mapping (--map SOURCE=REFERENCE)")
    refs = [config.select.reference] if config.select.mode == "reference" and config.select.reference else []
    return SwapJob(config, sources, refs)


def _run_swap(job: SwapJob, input_path: str, output_path: str, args: argparse.Namespace) -> JobResult:
    if Path(output_path).resolve() == Path(input_path).resolve():
        raise CliError(f"output {output_path!r} is the input: it would be overwritten while read")
    if is_image_path(input_path):
        if not is_image_path(output_path):
            raise CliError(f"output {output_path!r}: a picture input needs a picture output (.png, .jpg)")
        return job.run_image(input_path, output_path)
    if is_image_path(output_path):
        raise CliError(f"output {output_path!r}: a video input needs a video output (.mp4, .mkv, .mov)")
    progress: dict[str, Progress] = {}

    def on_start(info: Any) -> None:
        progress["bar"] = Progress(info.frames, enabled=not args.quiet)

    def on_frame(_slot: Any) -> None:
        progress["bar"].update()

    try:
        return job.run_video(input_path, output_path, on_start=on_start, on_frame=on_frame)
    finally:
        if "bar" in progress:
            progress["bar"].close()


def _summarise(result: JobResult, args: argparse.Namespace) -> None:
    for note in result.notes:
        print(f"note: {note}")
    if not args.quiet:
        print(format_report(result.report))
    if args.stats_json:
        write_json(result.report, args.stats_json)
        print(f"figures written to {args.stats_json}")


def cmd_swap(args: argparse.Namespace) -> int:
    config = _config_from(args)
    job = _job_for(config, args.source)
    job.open()
    for note in job.notes:
        print(f"note: {note}")
    job.notes.clear()
    result = _run_swap(job, args.input, args.output, args)
    _summarise(result, args)
    print(f"wrote {result.output}")
    return 0


def cmd_live(args: argparse.Namespace) -> int:
    from stream.live import LiveSink, format_status, open_sink, open_source, record_sink

    config = _config_from(args)
    width = height = None
    if args.size:
        w, sep, h = args.size.lower().partition("x")
        if not sep or not w.isdigit() or not h.isdigit():
            raise CliError(f"--size {args.size!r} must look like WIDTHxHEIGHT, e.g. 1280x720")
        width, height = int(w), int(h)
    if args.record and args.output == args.record:
        raise CliError(f"--record {args.record!r} is also the --output")
    job = _job_for(config, args.source)
    source = open_source(args.input, width, height, args.fps, open_timeout=args.open_timeout)
    info = source.open()
    try:
        job.open()
        sinks = [open_sink(args.output, info, config, args.vcam_backend, args.vcam_device)]
        if args.record:
            sinks.append(record_sink(args.record, info, config))
    except BaseException:
        source.close()
        raise
    live_sink = LiveSink(sinks)
    try:
        live_sink.open()
    except BaseException:
        source.close()
        raise
    for note in job.notes:
        print(f"note: {note}")
    job.notes.clear()
    names = " + ".join(getattr(s, "name", str(getattr(s, "path", s))) for s in sinks)
    print(f"live: {getattr(source, 'name', args.input)} {info.width}x{info.height} -> {names}"
          " (Ctrl-C to stop)", file=sys.stderr)

    def status(figures: dict[str, Any]) -> None:
        print(f"\r{format_status(figures)}   ", end="", file=sys.stderr, flush=True)

    result = job.run_live(source, live_sink, args.output,
                          status=None if args.quiet else status, duration=args.duration)
    if not args.quiet:
        print(file=sys.stderr)
    _summarise(result, args)
    if not args.quiet:
        live = result.report["live"]
        inp = result.report["input"]
        print(f"live: {result.report['frames_in']} frames in, {result.report['frames']} out, "
              f"{result.report['drops']} dropped; input measured at {inp.get('measured_fps', 0):.1f} fps; "
              f"detection every {live['detect_every_base']}-{live['detect_every_max']} frames"
              + (f"; {live['stopped']}" if live["stopped"] else ""))
    if args.record:
        print(f"recorded {args.record}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from stream.serve import FaceServer, start_server

    if args.max_peers < 1:
        raise CliError(f"--max-peers {args.max_peers}: must be at least 1")
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port {args.port}: not a port number")
    config = _config_from(args)
    sources = list(args.source)
    if not sources:
        sources = [_demo_face()]
        print(f"note: no --source given: offering the demo face ({sources[0]}); upload your own on the page")
    job = SwapJob(config, sources)
    job.open()
    job.share()
    for note in job.notes:
        print(f"note: {note}")

    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    server = FaceServer(job, max_peers=args.max_peers, codec=args.codec, say=say)
    server.add_job_faces()

    async def run() -> None:
        import signal

        runner, url = await start_server(server, args.host, args.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"serving {url} (engine {job.engines.name if job.engines else '?'}, up to "
              f"{args.max_peers} peers; Ctrl-C to stop)", flush=True)
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            open_peers = len(server.sessions)
            await server.close()
            await runner.cleanup()
            print(f"\nstopped: {server.sessions_started} peer session(s) served"
                  + (f", {open_peers} closed at exit" if open_peers else ""), flush=True)

    asyncio.run(run())
    return 0


def _demo_face() -> str:
    """scikit-image's astronaut as a photo file (the face offered when none is given)."""
    import tempfile

    import cv2

    from stream.demo_media import astronaut

    path = Path(tempfile.gettempdir()) / "facestream-astronaut.png"
    if not path.is_file():
        cv2.imwrite(str(path), astronaut())
    return str(path)


def cmd_demo(args: argparse.Namespace) -> int:
    from stream.demo import run_demo

    config = _config_from(args)
    return run_demo(config, Path(args.out_dir), args.seconds, args, _run_swap, _summarise)


def cmd_models(args: argparse.Namespace) -> int:
    from engines.catalog import CATALOG, entry, locate, search_dirs, user_models_dir

    if args.models_command == "fetch":
        from engines.fetch import fetch

        item = entry(args.name)
        folder = Path(args.fetch_dir or args.models_dir or user_models_dir())
        bar = Progress(0, label=f"{item.file}: ", unit="bytes")
        try:
            path = fetch(args.url, folder / item.file, args.sha256,
                         lambda done, total: bar.update(done=done, total=total))
        finally:
            bar.close()
        print(f"fetched {item.name} to {path}" + (" (sha256 verified)" if args.sha256 else ""))
        return 0
    dirs = search_dirs(args.models_dir)
    print("folders searched: " + ", ".join(str(d) for d in dirs))
    for name, item in CATALOG.items():
        path = locate(name, args.models_dir)
        where = f"found: {path}" if path else f"missing: put {item.file} in {dirs[0]}"
        print(f"  {name:<20} {item.kind:<10} {where}")
    return 0


def _written_so_far(job_output: str | None) -> str:
    if job_output and Path(job_output).is_file() and Path(job_output).stat().st_size > 0:
        return f" (what was written so far is in {job_output})"
    return ""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    handlers = {"swap": cmd_swap, "demo": cmd_demo, "models": cmd_models, "live": cmd_live,
                "serve": cmd_serve}
    output = getattr(args, "record", None) if args.command == "live" else getattr(args, "output", None)
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        print(f"\nfacestream: interrupted{_written_so_far(output)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (StreamError, EngineError, CliError, ValueError) as exc:
        print(f"facestream: error: {exc}{_written_so_far(output)}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # a bug: still one line, the traceback only with --verbose
        log.debug("unexpected error", exc_info=exc)
        print(f"facestream: internal error: {type(exc).__name__}: {exc} (run with --verbose for details)"
              f"{_written_so_far(output)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
