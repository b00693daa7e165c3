"""The `facestream` command: swap a face into a video or a picture, run it live or as a
WebRTC server, run the demo, list the model files. It turns every error into one line."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

from engines.errors import EngineError
from stream.cli.cameras_command import cmd_cameras
from stream.cli.demo import demo_face, run_demo
from stream.cli.models_command import cmd_models
from stream.cli.parser import CliError, build_parser, config_from_args
from stream.cli.swap_command import check_output, job_for, run_swap, summarise
from stream.cli.triton_repo_command import cmd_triton_repo
from stream.errors import StreamError
from stream.job.assembly import Pipeline
from stream.job.report import Written
from stream.job.swap_job import SwapJob
from stream.media.demo_clips import DemoUnavailable
from stream.media.video_info import VideoInfo
from stream.runtime.heap import bound_arenas, settle

if TYPE_CHECKING:
    from stream.ops.drain import StopDeadline
    from stream.ops.live import LiveOps

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130

log = logging.getLogger("facestream")


class StopOnCtrlC:
    """In a live run Ctrl-C is how a user ends it: the first one stops the pipeline cleanly
    (summary, exit 0), a second one interrupts at once. SIGTERM and SIGHUP (a service
    manager, a dropped SSH session) stop it the same way; repeated while the run is
    stopping they are ignored, so the output is finalised. Before the pipeline exists they
    interrupt (KeyboardInterrupt, Terminated) so that loading ends at once; outside the
    main thread nothing is changed."""

    SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)

    def __init__(self, deadline: StopDeadline | None = None) -> None:
        """`deadline`: started by SIGTERM or SIGHUP stopping the run (--drain-seconds)."""
        self.pipeline: Pipeline | None = None
        self.deadline = deadline
        self.stopping = False  # a signal has asked the running pipeline to stop
        self._previous: dict[int, Any] = {}

    def watch(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        pipeline = self.pipeline
        if pipeline is None:
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)
        if pipeline.runner.stopped:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            return
        pipeline.stop("stopped by Ctrl-C" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}")
        self.stopping = True
        if signum != signal.SIGINT and self.deadline is not None:
            self.deadline.start()

    def __enter__(self) -> StopOnCtrlC:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


def cmd_swap(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    check_output(args.input, args.output, args.overwrite)  # before the models load
    job = job_for(config, args.source)
    job.open()
    for note in job.notes:
        print(f"note: {note}")
    job.notes.clear()
    result = run_swap(job, args.input, args.output, quiet=args.quiet, overwrite=args.overwrite,
                      written=args.written)
    summarise(result, args.quiet, args.stats_json)
    print(f"wrote {result.output}")
    return 0


def cmd_live(args: argparse.Namespace) -> int:
    from stream.ops.live import LiveOps

    config = config_from_args(args)
    width = height = None
    if args.size:
        w, sep, h = args.size.lower().partition("x")
        if not sep or not w.isdigit() or not h.isdigit():
            raise CliError(f"--size {args.size!r} must look like WIDTHxHEIGHT, e.g. 1280x720")
        width, height = int(w), int(h)
    if args.record and args.output == args.record:
        raise CliError(f"--record {args.record!r} is also the --output")
    whep = _whep_output(args.output)
    token = _token_of(args)
    if token is not None and whep is None:
        raise CliError("--token and --token-file apply to --output whep only")
    ops = LiveOps.from_args(args)  # its ports bound now, before the models load
    if ops.urls():
        print(f"ops: {', '.join(ops.urls())}", file=sys.stderr, flush=True)
    try:
        return _run_live(args, config, width, height, whep, token, ops)
    finally:
        ops.close()


def _run_live(args: argparse.Namespace, config: Any, width: int | None, height: int | None,
              whep: tuple[str, int] | None, token: str | None, ops: LiveOps) -> int:
    from stream.cli.progress import StatusBoard
    from stream.job.runs import open_live, run_live
    from stream.job.status import format_live_summary, format_status
    from stream.media.close import close_quietly
    from stream.ops.drain import StopDeadline
    from stream.sinks.fanout import FanoutSink
    from stream.sinks.file import FileSink
    from stream.sinks.open import open_sink, record_sink
    from stream.sources.capture import WebcamSource
    from stream.sources.open import open_source

    board = StatusBoard(sys.stderr)
    # Signals are ours from here on: before the pipeline runs, a stop interrupts the loading
    # and whatever was opened is closed again (an output file holding no frame is removed);
    # once it runs, a stop ends it cleanly.
    with StopOnCtrlC(StopDeadline(args.drain_seconds)) as ctrl_c:
        ops.metrics.draining = lambda: ctrl_c.stopping
        job = job_for(config, args.source)
        job.open()
        ops.time_models(job)
        source = open_source(args.input, width, height, args.fps, open_timeout=args.open_timeout)
        made: list[FanoutSink] = []  # held here from the moment it exists, to be closed below

        def sinks_for(info: VideoInfo) -> FanoutSink:
            # A clip standing in for a camera has a sound track: recordings keep it, in step.
            audio = source.audio_from if isinstance(source, WebcamSource) else None
            sound = getattr(source, "audio", None)  # an RTSP camera's sound, delayed as its pictures
            if whep is not None:
                from stream.server.whep_output import WhepOutput

                sinks: list[Any] = [WhepOutput(info.width, info.height, *whep, token=token, sound=sound)]
                ops.watch_viewers(sinks[0])
            else:
                sinks = [open_sink(args.output, info, config, args.vcam_backend, args.vcam_device,
                                   audio_from=audio, sound=sound)]
            if args.record:
                sinks.append(record_sink(args.record, info, config, audio_from=audio, sound=sound))
            made.append(FanoutSink(sinks))
            return made[-1]

        try:
            info, live_sink = open_live(source, sinks_for)
            if getattr(source, "first_note", None):  # an RTSP camera: how long its first picture took, and why
                job.notes.append(f"{source.name}: {source.first_note}")
            if getattr(source, "range_note", None):  # an HDR camera: tone-mapped for the SDR outputs
                job.notes.append(f"{source.name}: {source.range_note}")
            for note in job.notes:
                print(f"note: {note}")
            job.notes.clear()
            print(f"live: {source.name} {info.width}x{info.height} -> {live_sink.name} (Ctrl-C to stop)",
                  file=sys.stderr)

            def status(figures: dict[str, Any]) -> None:
                board.show(format_status(figures))

            def started(pipeline: Pipeline) -> None:
                ctrl_c.watch(pipeline)
                ops.watch(pipeline)

            with board.carrying_logs():
                try:
                    result = run_live(job, source, live_sink, args.output,
                                      status=None if args.quiet else status,
                                      duration=args.duration, on_start=started)
                finally:
                    ops.over()
                    board.end()
        finally:
            # run_live closes both; an interrupt before it started them must too.
            files = [sink for fan in made for sink in fan.sinks if isinstance(sink, FileSink)]
            for fan in made:
                close_quietly(fan)
            close_quietly(source)
            kept = [sink for sink in files if sink.kept is not None]
            if kept:
                args.written.path, args.written.frames = kept[-1].kept, kept[-1].frames_written
        for sink in files:
            result.notes.extend(f"{sink.path}: {note}" for note in sink.notes)
        summarise(result, args.quiet, args.stats_json)
        if not args.quiet:
            print(format_live_summary(result.report))
        if args.record:
            print(f"recorded {args.record}")
    return 0


def _token_of(args: argparse.Namespace) -> str | None:
    """The access token of --token or --token-file (checked), or None."""
    from stream.server.tokens import check_token, read_token_file

    try:
        if args.token_file:
            return read_token_file(args.token_file)
        return check_token(args.token) if args.token is not None else None
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def _whep_output(spec: str) -> tuple[str, int] | None:
    """(host, port) of `--output whep[:[HOST:]PORT]`, checked before the models load."""
    if spec != "whep" and not spec.startswith("whep:"):
        return None
    from stream.server.whep_output import parse_whep_output

    try:
        return parse_whep_output(spec)
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from stream.ops.listen import bind_socket
    from stream.server.guard import ConnectionLimits
    from stream.server.ice import ice_addresses_for

    if args.max_peers < 1:
        raise CliError(f"--max-peers {args.max_peers}: must be at least 1")
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port {args.port}: not a port number")
    if args.max_upload_pixels < 1:
        raise CliError(f"--max-upload-pixels {args.max_upload_pixels}: must be at least 1")
    if args.max_viewers < 0:
        raise CliError(f"--max-viewers {args.max_viewers}: must be 0 or more")
    token = _token_of(args)
    from stream.ops.drain import check_drain_seconds
    from stream.ops.metrics import check_name

    try:
        check_name(args.name)
        check_drain_seconds(args.drain_seconds)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    for flag, seconds in (("--header-timeout", args.header_timeout), ("--keepalive-timeout", args.keepalive_timeout)):
        if not 0 < seconds < 1e6:
            raise CliError(f"{flag} {seconds:g}: must be more than 0 seconds")
    for flag, count in (("--max-connections", args.max_connections),
                        ("--max-connections-per-client", args.max_connections_per_client)):
        if count < 1:
            raise CliError(f"{flag} {count}: must be at least 1")
    limits = ConnectionLimits(header_timeout=args.header_timeout, keepalive_timeout=args.keepalive_timeout,
                              max_connections=args.max_connections, per_client=args.max_connections_per_client)
    try:
        ice_addresses = ice_addresses_for(args.host, args.ice_host)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    config = config_from_args(args)
    sock = bind_socket(args.host, args.port)  # a busy port is said before aiortc and the models load
    _stop_on_termination()  # while the models load; the server's loop takes the signals after
    try:
        from stream.server.app import FaceServer, start_server

        sources = list(args.source)
        if not sources:
            try:
                sources = [demo_face()]
            except DemoUnavailable as exc:
                raise CliError(f"give --source PHOTO (no --source given, and {exc})") from exc
            print(f"note: no --source given: offering the demo face ({sources[0]}); upload your own on the page")
        job = SwapJob(config, sources)
        job.open()
        job.share()
    except BaseException:
        sock.close()
        raise
    for note in job.notes:
        print(f"note: {note}")
    job.notes.clear()

    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    server = FaceServer(job, max_peers=args.max_peers, codec=args.codec, say=say, ice_addresses=ice_addresses,
                        share_uploads=args.share_uploads, max_upload_pixels=args.max_upload_pixels,
                        token=token, max_viewers=args.max_viewers, name=args.name,
                        metrics_public=args.metrics_public)
    server.add_job_faces()
    settle()  # the models and faces stay for good: out of every later collection's way
    def drain() -> None:
        server.ops.start_drain()
        print(f"draining (SIGTERM): no new sessions; {len(server.sessions)} open, given up to "
              f"{args.drain_seconds:g} s to end", flush=True)

    async def run() -> None:
        from stream.ops.drain import ServeSignals

        runner, url = await start_server(server, args.host, args.port, sock=sock, limits=limits)
        # SIGTERM drains (a second one changes nothing); Ctrl-C and SIGHUP stop at once.
        signals = ServeSignals(drain)
        signals.install(asyncio.get_running_loop())
        where = "every interface" if ice_addresses is None else ", ".join(ice_addresses)
        print(f"serving {url} (engine {job.models.name}, up to "
              f"{args.max_peers} peers, ICE on {where}; Ctrl-C to stop)", flush=True)
        print(f"WHIP: {url}whip, WHEP: {url}whep/SESSION"
              + ("; access token required (Bearer, or open the page once as ?access_token=TOKEN)"
                 if token else ""), flush=True)
        ended = "stopped"
        try:
            ended = await signals.wait(args.drain_seconds, lambda: len(server.sessions))
        finally:
            open_peers = len(server.sessions)
            await server.close()
            await runner.cleanup()
            signals.remove()
            print(f"\nstopped: {server.sessions_started} peer session(s) served"
                  + (f", {open_peers} closed at exit" if open_peers else "")
                  + (f" ({ended})" if ended != "stopped" else ""), flush=True)

    asyncio.run(run())
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    return run_demo(config, Path(args.out_dir), args.seconds, quiet=args.quiet, stats_json=args.stats_json,
                    written=args.written)


def cmd_benchmark(args: argparse.Namespace) -> int:
    from stream.cli.benchmark_command import cmd_benchmark as run

    return run(args)


def cmd_doctor(args: argparse.Namespace) -> int:
    from stream.cli.doctor import run_doctor

    return run_doctor(config_from_args(args))


class Terminated(KeyboardInterrupt):
    """SIGTERM (timeout, docker stop, systemd) or SIGHUP (a dropped SSH session): the run
    stops as on Ctrl-C, so what was written is finalised; the exit code is 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def _stop_on_termination() -> None:
    """SIGTERM and SIGHUP end a run the way Ctrl-C does (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, _raise_terminated)


def _written_so_far(written: Written) -> str:
    if written.path is not None and written.frames:
        return f" (what was written so far, {written.frames} frame(s), is in {written.path})"
    return ""


# The long-running commands, whose malloc arenas are bounded (stream/runtime/heap.py).
LIVE_COMMANDS = ("live", "serve")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    handlers = {"swap": cmd_swap, "demo": cmd_demo, "models": cmd_models, "live": cmd_live,
                "serve": cmd_serve, "doctor": cmd_doctor, "benchmark": cmd_benchmark, "triton-repo": cmd_triton_repo,
                "cameras": cmd_cameras}
    args.written = written = Written()
    if args.command in LIVE_COMMANDS:
        # Before any thread: each thread would otherwise grow an arena of its own (a live
        # run's first faces were judged on a fresh one; a server's sessions kept theirs).
        bound_arenas()
    if args.command != "serve":  # the server handles its own signals on its event loop
        _stop_on_termination()
    try:
        return handlers[args.command](args)
    except Terminated as exc:
        print(f"\nfacestream: stopped by {exc}{_written_so_far(written)}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print(f"\nfacestream: interrupted{_written_so_far(written)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (StreamError, EngineError, CliError, ValueError) as exc:
        print(f"facestream: error: {exc}{_written_so_far(written)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `facestream models | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except Exception as exc:  # a bug: still one line, the traceback only with --verbose
        log.debug("unexpected error", exc_info=exc)
        print(f"facestream: internal error: {type(exc).__name__}: {exc} (run with --verbose for details)"
              f"{_written_so_far(written)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
