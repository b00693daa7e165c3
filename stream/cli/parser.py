"""The `facestream` command line: its parser, and the run configuration its flags make."""
from __future__ import annotations

import argparse
import json

from engines.backends.addresses import normalize_url, split_urls
from engines.backends.base import parse_size
from engines.backends.registry import RUNTIME_NAMES
from engines.models.enhancers import ENHANCER_NAMES
from engines.models.masks import AREAS, MASK_TYPES, REGIONS
from engines.models.swappers import SWAPPER_NAMES
from stream.config import BLENDS, ENGINE_NAMES, SELECT_MODES, Config, load_config, preset_names
from stream.media.dynamic_range import CODECS as FILE_CODECS
from stream.server import (
    CODECS,
    HEADER_TIMEOUT_S,
    KEEPALIVE_TIMEOUT_S,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_CLIENT,
    MAX_UPLOAD_PIXELS,
)
from stream.sources.open import OPEN_TIMEOUT_S

SOURCE_HELP = ("the face to put in: a photo (its largest face is used), or a folder of photos or a short "
               "video of one person (several views: the classical swapper warps each face from the view "
               "nearest its pose, the neural ones average the identity; photos of someone else are left "
               "out with a warning). Several --source flags are different people, for --select mapping")
# A server's browsers bring their own faces: no reference photos or mappings there.
SERVER_SELECT_MODES = ("all", "largest")


class CliError(Exception):
    """A usage problem found after parsing (e.g. a mapping entry without '=')."""


def _add_run_options(p: argparse.ArgumentParser, server: bool = False) -> None:
    """The configuration and reporting options of a run; `server`: only those that apply
    to `serve` (no reference photos, no output encoding, no run report)."""
    g = p.add_argument_group("configuration")
    g.add_argument("--config", metavar="NAME|PATH",
                   help=f"a shipped preset ({', '.join(preset_names())}) or a YAML file; flags below override it")
    g.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override any config field, e.g. --set detect.every=5 (repeatable)")
    g.add_argument("--engine", choices=ENGINE_NAMES,
                   help="model family: neural (SCRFD, ArcFace, inswapper files you supply), dlib (the "
                        "embedded default), or auto (default): neural when its files are found")
    g.add_argument("--models-dir", metavar="DIR",
                   help="folder of the neural model files (searched before $FACESTREAM_MODELS and "
                        "the per-user folder; see `facestream models`)")
    g.add_argument("--swapper", choices=SWAPPER_NAMES, metavar="NAME",
                   help=f"the neural swapper (models.swapper; default inswapper_128): {', '.join(SWAPPER_NAMES)}; "
                        f"`facestream models fetch NAME` gets its file")
    g.add_argument("--mask", metavar="TYPES",
                   help=f"face masks (mask.types), comma-separated: {', '.join(MASK_TYPES)} (occlusion needs an "
                        f"XSeg file, region a BiSeNet file: the neural swappers'; area is made from the "
                        f"landmarks, on the embedded default too)")
    g.add_argument("--mask-areas", metavar="NAMES",
                   help=f"with --mask area: the areas swapped (mask.areas; {', '.join(AREAS)}: leave mouth out "
                        f"to keep the target's own mouth)")
    g.add_argument("--mask-regions", metavar="NAMES",
                   help=f"with --mask region: the regions swapped (mask.regions; {', '.join(REGIONS)})")
    g.add_argument("--pixel-boost", type=int, metavar="SIZE",
                   help="swap at SIZE px, as tiles of the swapper's own size (models.pixel_boost; a multiple "
                        "of it up to 1024: inswapper 256 costs 4 model calls a face, 512 16)")
    if server:  # every browser brings its own faces: no reference photos here
        g.add_argument("--select", choices=SERVER_SELECT_MODES,
                       help="which faces of each camera to swap: all (default) or the largest")
        p.set_defaults(reference=None, mapping=[], x264_preset=None, crf=None, serial=False, stats_json=None,
                       file_codec=None, tone_map=None)
    else:
        _add_selection_options(g)
    g.add_argument("--blend", choices=BLENDS, help="feather: soft alpha edge (fast); poisson: seamless clone")
    g.add_argument("--detect-every", type=int, metavar="N", help="run face detection every N frames")
    g.add_argument("--enhance", action="store_true",
                   help="restore the swapped faces with GFPGAN 1.4 (its file is needed: see `facestream models`)")
    g.add_argument("--enhancer", choices=ENHANCER_NAMES, metavar="NAME",
                   help=f"restore the swapped faces with this enhancer (enhance.model; implies --enhance): "
                        f"{', '.join(ENHANCER_NAMES)}")
    g.add_argument("--enhance-every", type=int, metavar="K",
                   help="with --enhance: run it every K-th frame per face, re-pasting its last result between")
    g.add_argument("--max-faces", type=int, metavar="N", help="swap at most N faces per frame")
    g.add_argument("--runtime", choices=RUNTIME_NAMES,
                   help="what runs the models: auto (default: ONNX Runtime, and on the CPU each model on "
                        "the runtime its INT8 report measured faster here), onnxruntime, tensorrt "
                        "(native engines, built and cached), triton (the models a Triton server serves, see "
                        "--triton-url; the local ONNX Runtime for the rest), or openvino (Intel's runtime for laptop "
                        "CPUs, Intel GPUs and NPUs, see --device; pip install 'facestream[openvino]')")
    g.add_argument("--device", metavar="CPU|GPU|NPU|AUTO",
                   help="--runtime openvino only: the device it runs the models on (runtime.device): CPU, "
                        "GPU (an Intel GPU; GPU.1 the second), NPU, or AUTO (default: OpenVINO's own pick, "
                        "an Intel GPU where there is one, else the CPU); `facestream doctor` lists those seen")
    g.add_argument("--precision", choices=("auto", "fp32", "fp16", "int8"),
                   help="which model files run (models.precision): auto (default) the INT8 files that "
                        "passed their drift budget (`facestream models quantize`) on a CPU with VNNI or AMX, "
                        "FP16 engines on a GPU as the VRAM plan says; fp32 the float files; fp16 half-"
                        "precision TensorRT engines (GPU runtimes only); int8 every INT8 file there is")
    g.add_argument("--swap-every", metavar="N|auto",
                   help="each face's swap every N frames, its last swap carried between by a warp onto the "
                        "face's landmarks as they move (models.swap_every): a long file's trade of quality for "
                        "speed; auto (default): files every frame, live runs of the neural engine as often as a "
                        "worker beside the frames can (a frame never waits for a swap), the classical engine "
                        "every frame")
    g.add_argument("--triton-url", metavar="URL[,URL...]",
                   help="Triton servers' gRPC addresses (host:port, default port 8001), requests "
                        "spread over those up; implies --runtime triton")
    g.add_argument("--max-vram", metavar="SIZE",
                   help="GPU runs: plan for at most SIZE of device memory (e.g. 1.5G, 800M; default: 85%% of "
                        "the card, within what is free); the plan is printed at the start")
    o = p.add_argument_group("reporting")
    if not server:
        g.add_argument("--x264-preset", metavar="PRESET", help="libx264 preset of the output (ultrafast ... veryslow)")
        g.add_argument("--crf", type=int, help="libx264 quality, 0-51 (lower is better; default 20)")
        g.add_argument("--codec", dest="file_codec", choices=FILE_CODECS,
                       help="the video encoder of file outputs (encode.codec): auto (default) writes H.264 for "
                            "8-bit inputs and HEVC Main10 for 10-bit ones, which keep their bit depth, colour "
                            "tags and HDR10 metadata; libx264 writes 8 bits (HDR inputs are then tone-mapped)")
        g.add_argument("--tone-map", action="store_true", default=None,
                       help="HDR inputs (PQ, HLG) become BT.709 SDR 8-bit (a Hable tone map on linear light), "
                            "tagged BT.709 (encode.tone_map); without it a 10-bit HDR file stays HDR. Live "
                            "outputs are SDR and always tone-map")
        g.add_argument("--serial", action="store_true",
                       help="run every stage on one thread (for comparison; staged threads are the default)")
        o.add_argument("--stats-json", metavar="PATH", help="also write the run's figures as JSON")
    o.add_argument("-q", "--quiet", action="store_true",
                   help="no line per peer" if server else "no progress bar and no summary table")
    o.add_argument("-v", "--verbose", action="store_true", help="debug logging, with tracebacks")


def _add_service_options(p: argparse.ArgumentParser, name: str, live: bool) -> None:
    """Running as a service: the metrics' stream label, the drain on SIGTERM, and (live) the
    probe and metrics ports (stream.ops)."""
    g = p.add_argument_group("as a service")
    g.add_argument("--name", default=name, metavar="NAME",
                   help=f"the stream label of every metric (default {name}; 1-63 of A-Z a-z 0-9 _ . -)")
    g.add_argument("--drain-seconds", type=float, default=20.0, metavar="S",
                   help="on SIGTERM: " + ("the most the clean stop may take before it is cut short"
                                          if live else "stop taking sessions (/readyz 503) and give the open "
                                          "ones up to S seconds to end before closing them")
                        + " (default 20; 0: at once)")
    if not live:
        g.add_argument("--metrics-public", action="store_true",
                       help="with --token: serve /metrics without the token (the probes never need it)")
        return
    g.add_argument("--health-port", type=int, metavar="PORT",
                   help="serve /healthz and /readyz on PORT (default: off; 0: any free port)")
    g.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus /metrics on PORT (default: off; 0: any free port)")
    g.add_argument("--ops-host", default="127.0.0.1", metavar="HOST",
                   help="address the health and metrics ports listen on (default 127.0.0.1)")


def _add_selection_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--select", choices=SELECT_MODES,
                   help="which faces to swap: all (default), the largest, only the --reference person, "
                        "or a --map of sources to people")
    g.add_argument("--reference", metavar="PHOTO", help="with --select reference: a photo of the person to swap")
    g.add_argument("--map", dest="mapping", action="append", default=[], metavar="SOURCE=REFERENCE",
                   help="with --select mapping: put SOURCE's face on the person in REFERENCE (repeatable; "
                        "SOURCE may be a photo, a folder of photos or a video of one person)")


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
    swap.add_argument("--source", action="append", default=[], metavar="PHOTO|DIR|VIDEO",
                      help=SOURCE_HELP)
    swap.add_argument("--input", "-i", required=True, metavar="PATH", help="video (.mp4, .mkv, ...) or picture")
    swap.add_argument("--output", "-o", required=True, metavar="PATH",
                      help="where to write the result (.mp4/.mkv/.mov for videos, .png/.jpg for pictures)")
    swap.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=True,
                      help="replace an existing OUTPUT (the default); --no-overwrite refuses to. Either way "
                           "the result is written under a hidden name beside OUTPUT and renamed onto it once "
                           "finalised, so a failed run never leaves a broken OUTPUT")
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
    live.add_argument("--source", action="append", default=[], metavar="PHOTO|DIR|VIDEO",
                      help=SOURCE_HELP)
    live.add_argument("--input", "-i", required=True, metavar="INPUT",
                      help="webcam:N (or webcam:/dev/videoN), rtsp://..., or a video file played in real time")
    live.add_argument("--output", "-o", default="preview", metavar="OUTPUT",
                      help="vcam (virtual camera), rtsp://server/path (publish), whep[:[HOST:]PORT] (serve "
                           "WHEP viewers at http://HOST:PORT/whep; default 127.0.0.1:8080), preview (a window; "
                           "default), or a file")
    live.add_argument("--record", metavar="FILE", help="also write the swapped stream to FILE (.mp4, .mkv)")
    live_access = live.add_mutually_exclusive_group()
    live_access.add_argument("--token", metavar="TOKEN",
                             help="--output whep: viewers must send 'Authorization: Bearer TOKEN'")
    live_access.add_argument("--token-file", metavar="PATH", help="as --token, read from the first line of PATH")
    live.add_argument("--size", metavar="WxH", help="webcam: ask for this picture size (e.g. 1280x720)")
    live.add_argument("--fps", type=float, help="webcam: ask for this frame rate")
    live.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this many seconds")
    live.add_argument("--open-timeout", type=float, default=OPEN_TIMEOUT_S, metavar="SECONDS",
                      help="rtsp: give up on a server that does not answer after this long, and, once it "
                           "answers, on a first picture that does not come within two keyframe intervals and "
                           f"at least this long (a camera's keyframes may be 10 s apart; default {OPEN_TIMEOUT_S:g}); "
                           "a refused connection "
                           "or an unknown path (404) fails at once")
    live.add_argument("--vcam-device", metavar="DEVICE", help="virtual camera device (e.g. /dev/video10)")
    live.add_argument("--vcam-backend", metavar="NAME", help="pyvirtualcam backend (default: the platform's)")
    _add_service_options(live, "live", live=True)
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
               "                                                  # the camera on https or localhost only)\n"
               "  facestream serve --ice-host 192.168.1.20        # page on loopback (behind an https\n"
               "                                                  # proxy), media on the LAN address\n"
               "  facestream serve --token-file token.txt         # WHIP: OBS publishes to\n"
               "                                                  # http://HOST:8080/whip, Bearer token;\n"
               "                                                  # players watch /whep/SESSION",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--source", action="append", default=[], metavar="PHOTO|DIR|VIDEO",
                       help="a face offered on the page (repeatable; default: scikit-image's astronaut): a "
                            "photo, or a folder of photos or a short video of one person; the page can upload more")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1); WebRTC's ICE candidates are gathered "
                            "on it too, so 127.0.0.1 serves this machine only and 0.0.0.0 every interface")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    serve.add_argument("--ice-host", action="append", default=[], metavar="ADDR",
                       help="gather WebRTC (ICE) candidates on ADDR instead of the --host address "
                            "(repeatable; 0.0.0.0: every interface), e.g. a LAN address behind a proxy")
    serve.add_argument("--share-uploads", action="store_true",
                       help="show every visitor's uploaded faces to every visitor (by default an upload "
                            "is its uploader's own)")
    serve.add_argument("--max-upload-pixels", type=int, default=MAX_UPLOAD_PIXELS, metavar="N",
                       help="refuse uploaded photos larger than N pixels, from their header, before "
                            f"decoding (default {MAX_UPLOAD_PIXELS})")
    serve.add_argument("--max-peers", type=int, default=4, metavar="N",
                       help="browsers served at once (default 4); each runs its own pipeline")
    serve.add_argument("--max-viewers", type=int, default=8, metavar="N",
                       help="WHEP viewers at once, all sessions together (default 8); each is one more encode")
    conns = serve.add_argument_group("connections (what one client may hold; see docs/scale-out.md, \"Limits\")")
    conns.add_argument("--header-timeout", type=float, default=HEADER_TIMEOUT_S, metavar="S",
                       help="close a connection whose request headers are not in within S seconds of "
                            f"its opening (default {HEADER_TIMEOUT_S:g})")
    conns.add_argument("--keepalive-timeout", type=float, default=KEEPALIVE_TIMEOUT_S, metavar="S",
                       help=f"close a connection idle between requests for S seconds (default {KEEPALIVE_TIMEOUT_S:g})")
    conns.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS, metavar="N",
                       help=f"HTTP connections open at once, all clients (default {MAX_CONNECTIONS}); "
                            "more are answered 503 and closed")
    conns.add_argument("--max-connections-per-client", type=int, default=MAX_CONNECTIONS_PER_CLIENT, metavar="N",
                       help=f"HTTP connections open at once from one address (default {MAX_CONNECTIONS_PER_CLIENT})")
    access = serve.add_mutually_exclusive_group()
    access.add_argument("--token", metavar="TOKEN",
                        help="require this access token on every request: WHIP/WHEP clients send it as "
                             "'Authorization: Bearer TOKEN'; a browser opens the page once as "
                             "/?access_token=TOKEN (kept in a cookie)")
    access.add_argument("--token-file", metavar="PATH",
                        help="as --token, the token read from the first line of PATH (kept out of the "
                             "process list)")
    serve.add_argument("--codec", choices=CODECS, default="vp8",
                       help="video codec to send back when the browser offers it (default vp8: the "
                            "cheapest on a CPU here; auto: the browser's first choice)")
    _add_service_options(serve, "serve", live=False)
    _add_run_options(serve, server=True)
    bench = sub.add_parser(
        "benchmark", help="how fast this machine swaps: fps staged and serial, stage times, latency, "
                          "memory, and whether it is real time",
        description="Runs built-in clips (720p and 1080p, one face and six faces; made from installed "
                    "pictures) or your own --input through the job you configure, staged (a thread a "
                    "stage, the default) and serial (one thread), alternating, and prints for each clip: "
                    "fps of both, per-stage p50/p95, capture-to-sink latency, the run's peak resident "
                    "memory, and a verdict such as 'real time at 30 fps: yes, with 4.2 ms a frame to "
                    "spare'. Outputs are written to a temporary folder and deleted.",
        epilog="examples:\n"
               "  facestream benchmark                          # 720p, one face and six, the default preset\n"
               "  facestream benchmark --config fast --clips all --json bench.json\n"
               "  facestream benchmark --input my_clip.mp4 --source me.jpg --fps 25",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("--source", action="append", default=[], metavar="PHOTO|DIR|VIDEO",
                       help="photo of the face to put in, or a folder of photos or a short video of one "
                            "person (default: scikit-image's astronaut)")
    bench.add_argument("--input", "-i", metavar="PATH", help="your own video instead of the built-in clips")
    bench.add_argument("--clips", default="720p-1,720p-6", metavar="NAMES",
                       help="built-in clips, comma-separated: 720p-1, 720p-6, 1080p-1, 1080p-6, or all "
                            "(default: 720p-1,720p-6)")
    bench.add_argument("--seconds", type=float, default=5.0, help="length of each built-in clip (default 5)")
    bench.add_argument("--repeat", type=int, default=1, metavar="N",
                       help="runs of each mode per clip; the figures are the median run's (default 1)")
    bench.add_argument("--fps", type=float, metavar="FPS",
                       help="the rate real time means (default: the clip's own, 30 for the built-in ones)")
    bench.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    bench.add_argument("--markdown", action="store_true",
                       help="also print a Markdown table with the date and the machine (as in docs/performance.md)")
    _add_run_options(bench)
    doctor = sub.add_parser(
        "doctor", help="say what this machine can do and what is missing, with the fix for each",
        description="Checks Python and the packages, ONNX Runtime's providers, CUDA devices and memory, "
                    "TensorRT and cupy, pinned memory, the model files, a virtual-camera device, the RTSP "
                    "test server and Chromium, and prints the VRAM plan of the default run (with the "
                    "configuration options below). Changes nothing; exits 0 whatever it finds.")
    dg = doctor.add_argument_group("configuration")
    dg.add_argument("--config", metavar="NAME|PATH", help="plan for this preset or YAML file")
    dg.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                    help="override a config field (repeatable)")
    dg.add_argument("--models-dir", metavar="DIR", help="look for the model files here first")
    dg.add_argument("--enhance", action="store_true", help="plan with the GFPGAN enhancer on")
    dg.add_argument("--max-vram", metavar="SIZE", help="plan for at most SIZE of device memory (e.g. 1.5G)")
    doctor.set_defaults(engine=None, select=None, blend=None, detect_every=None, max_faces=None, x264_preset=None,
                        file_codec=None, tone_map=None,
                        crf=None, enhance_every=None, reference=None, mapping=[], serial=False)
    models = sub.add_parser(
        "models", help="list the standard model files (found or missing, licence), or fetch them",
        description="Lists each model of the catalog: the file found, or where to put it, and its licence. "
                    "Folders searched: --models-dir, then $FACESTREAM_MODELS, then the per-user folder. "
                    "`models fetch` downloads the default neural set (`models fetch NAME ...` those, "
                    "`--all` every one), each verified against its published checksum; nothing is ever "
                    "downloaded unless asked.")
    models.add_argument("--models-dir", metavar="DIR", help="search (and fetch into) this folder first")
    msub = models.add_subparsers(dest="models_command", metavar="ACTION")
    fetch = msub.add_parser(
        "fetch", help="download model files by name, verified (the default neural set with no name)",
        description="Downloads each named model (none: the default neural set, what --engine neural runs; "
                    "--all: the whole catalog) from its publisher's address first, then the mirrors, and "
                    "keeps it only when its checksum matches: the sha256 a public source states, or the "
                    "CRC32 the host publishes beside the file. An address that is down, sends a file cut "
                    "short or with the wrong checksum gives way to the next; a dropped connection is "
                    "resumed; nothing partial is ever left. Each file's licence is printed before it is "
                    "downloaded. A file already present is kept (--force fetches it again).")
    fetch.add_argument("names", nargs="*", metavar="NAME", help="catalog names, e.g. inswapper_128")
    fetch.add_argument("--all", action="store_true", help="every model of the catalog")
    fetch.add_argument("--mirror", dest="mirrors", action="append", default=[], metavar="URL",
                       help="a mirror of your own instead of the public addresses: URL/<file> (http, https "
                            "or file; a folder's path is taken as its file:// URL), verified by the "
                            "catalog's sha256 or by URL/<name>.hash (repeatable, tried in order; also "
                            "$FACESTREAM_MODEL_MIRRORS, comma-separated)")
    fetch.add_argument("--url", help="download one named model from this URL instead (your own address)")
    fetch.add_argument("--sha256", metavar="HEX", help="with --url: the file's expected sha256")
    fetch.add_argument("--force", action="store_true", help="fetch again files that are present")
    fetch.add_argument("--models-dir", dest="fetch_dir", metavar="DIR",
                       help="folder to save into (default: --models-dir, else the per-user folder)")
    quant = msub.add_parser(
        "quantize", help="write INT8 files (<stem>_int8.onnx) beside the float ones, each checked "
                         "against its family's drift budget",
        description="Quantises each named model (catalog names, or dlib_embedder: the embedded default's "
                    "face embedding, exported to ONNX first) to a static INT8 QDQ file beside its float "
                    "file, with a JSON report beside that. Calibration runs on the inputs the pipeline "
                    "makes from --calibrate (aligned face crops, or whole frames for detectors); the "
                    "drift is measured on held-out faces against the float file. A file over its "
                    "family's budget is not written (the float file stays in use); the first and last "
                    "layers, and the layers a sensitivity pass finds worst, stay in float. Budgets: "
                    "swapper PSNR >= 30 dB and identity cosine >= 0.98; detector recall >= 99% and box "
                    "IoU median >= 0.95; embedder 1 - cosine median <= 0.01, p95 <= 0.03; enhancer PSNR "
                    ">= 30 dB; occluder and parser mask IoU >= 0.95; landmarker point error <= 1% of "
                    "the crop. Exits 0 only if every named model was written.")
    quant.add_argument("names", nargs="+", metavar="NAME", help="catalog names (e.g. inswapper_128), or "
                                                                 "dlib_embedder")
    quant.add_argument("--calibrate", metavar="VIDEO|PHOTO|FOLDER",
                       help="media to calibrate on (default: the demo's pictures, from installed packages)")
    quant.add_argument("--faces", type=int, default=16, metavar="N",
                       help="calibration inputs (faces, or frames for a detector; default 16); half as "
                            "many are held out to measure the drift")
    quant.add_argument("--no-budget", action="store_true",
                       help="write the file whatever its drift, marked unchecked in its report and in "
                            "`facestream models`: --precision auto never picks it (for measuring speed "
                            "on stand-ins, or judging the output yourself)")
    quant.add_argument("--threads", type=int, default=0, metavar="N",
                       help="ONNX Runtime threads for the calibration and the speed figures (default: "
                            "the machine's cores)")
    quant.add_argument("--models-dir", dest="quantize_dir", metavar="DIR",
                       help="look for the model files here first (the INT8 file is written beside each)")
    triton = sub.add_parser(
        "triton-repo", help="write a Triton Inference Server model repository for the model files found",
        description="Writes DIR/<model>/config.pbtxt (max batch size where the file's batch axis is dynamic, "
                    "dynamic batching, instance groups) and the model file for each catalog model found "
                    "(--models-dir, $FACESTREAM_MODELS, the per-user folder), then prints how to start "
                    "Triton on it. Backends: onnxruntime and tensorrt for NVIDIA's Triton container on "
                    "GPUs; python runs the same ONNX files through ONNX Runtime on the CPU (the same "
                    "container serves it, with onnxruntime installed into it).")
    triton.add_argument("dir", metavar="DIR", help="the repository folder (created; our model folders replaced)")
    triton.add_argument("--backend", choices=("onnxruntime", "tensorrt", "python"), default="onnxruntime",
                        help="Triton backend (default onnxruntime)")
    triton.add_argument("--models-dir", metavar="DIR", help="look for the model files here first")
    triton.add_argument("--max-batch", type=int, default=8, metavar="N",
                        help="max_batch_size of the models with a dynamic batch axis (default 8)")
    triton.add_argument("--instances", type=int, default=1, metavar="N",
                        help="model instances per GPU (or on the CPU) (default 1)")
    triton.add_argument("--precision", choices=("auto", "fp32", "int8"), default="auto",
                        help="which file to serve under each model's name: auto the INT8 file "
                             "(<stem>_int8.onnx) where its report says it passed its drift budget, int8 "
                             "the INT8 file wherever there is one, fp32 the float files (default auto)")
    triton.add_argument("--cpu", action="store_true", help="instances on the CPU (KIND_CPU) instead of GPUs")
    triton.add_argument("--symlink", action="store_true",
                        help="link the model files instead of copying them (a container then needs "
                             "their folder mounted at the same path)")
    _add_cameras_parser(sub)
    return parser


def _add_cameras_parser(sub: argparse._SubParsersAction) -> None:
    cams = sub.add_parser(
        "cameras", help="render the Kubernetes Deployments of the camera workers from one list",
        description="Reads LIST (deploy/kubernetes/cameras.yaml: a name, an rtsp:// input and output and a "
                    "source photo per camera) and writes one Deployment per camera running `facestream live` "
                    "on it, with its health and metrics ports, probes and the models volume. Adding a camera "
                    "is one entry in LIST and this command again.",
        epilog="examples:\n"
               "  facestream cameras deploy/kubernetes/cameras.yaml -o deploy/kubernetes/cameras/workers.yaml\n"
               "  facestream cameras deploy/kubernetes/cameras.yaml -o deploy/kubernetes/cameras/workers.yaml --check\n"
               "  facestream cameras one.yaml --image localhost/facestream:latest --pull-never --host-network \\\n"
               "      --models-host-path /srv/models --no-probes > pod.yaml && podman kube play pod.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cams.add_argument("list", metavar="LIST", help="the cameras' YAML list")
    cams.add_argument("-o", "--output", metavar="FILE", help="write the render to FILE (default: print it)")
    cams.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 if FILE (-o) is not the render of LIST (for CI)")
    cams.add_argument("--image", default="facestream", metavar="IMAGE",
                      help="the workers' image (default facestream: the name the kustomization's images: "
                           "entry sets to your registry and tag)")
    cams.add_argument("--pull-never", action="store_true",
                      help="imagePullPolicy Never: a local image only (podman kube play, kind)")
    cams.add_argument("--host-network", action="store_true",
                      help="pods on the host's network (to reach cameras or a server on its loopback or LAN); "
                           "camera N's health and metrics ports are then 8100+N and 8200+N")
    cams.add_argument("--models-host-path", metavar="DIR",
                      help="the models from this folder of the host (hostPath) instead of the "
                           "facestream-models volume claim")
    cams.add_argument("--no-probes", action="store_true",
                      help="leave out the health probes (podman kube play runs an HTTP probe as curl inside "
                           "the container)")


def _size(flag: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_size(text)
    except ValueError as exc:
        raise CliError(f"{flag} {exc}") from None


def _runtime_overrides(kind: str | None, triton_url: str | None) -> dict[str, object]:
    """runtime.kind and runtime.triton_urls from --runtime and --triton-url (which implies triton)."""
    if triton_url is None:
        return {"runtime.kind": kind}
    try:
        urls = [normalize_url(u) for u in split_urls(triton_url)]
    except ValueError as exc:
        raise CliError(f"--triton-url: {exc}") from None
    if not urls:
        raise CliError(f"--triton-url {triton_url!r} names no server (host:port[,host:port...])")
    return {"runtime.kind": kind or "triton", "runtime.triton_urls": urls}


def config_from_args(args: argparse.Namespace) -> Config:
    overrides = list(args.overrides)
    simple = {
        "engine": args.engine, "select.mode": args.select, "swap.blend": args.blend,
        "detect.every": args.detect_every, "pipeline.max_faces": args.max_faces,
        "encode.preset": args.x264_preset, "encode.crf": args.crf, "models.dir": args.models_dir,
        "encode.codec": getattr(args, "file_codec", None), "encode.tone_map": getattr(args, "tone_map", None),
        "models.swapper": getattr(args, "swapper", None), "models.pixel_boost": getattr(args, "pixel_boost", None),
        "mask.types": getattr(args, "mask", None), "mask.areas": getattr(args, "mask_areas", None),
        "mask.regions": getattr(args, "mask_regions", None),
        "enhance.every": args.enhance_every,
        "enhance.enabled": True if args.enhance or getattr(args, "enhancer", None) else None,
        "enhance.model": getattr(args, "enhancer", None),
        "runtime.max_vram": _size("--max-vram", args.max_vram),
        "runtime.device": getattr(args, "device", None),
        "models.precision": getattr(args, "precision", None),
        "models.swap_every": getattr(args, "swap_every", None),
    }
    simple.update(_runtime_overrides(getattr(args, "runtime", None), getattr(args, "triton_url", None)))
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
