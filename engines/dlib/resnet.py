"""dlib's 128-d face-embedding ResNet, read from its own file and run with numpy.

dlib runs the network (`face_recognition_model_v1`) in about 130-200 ms a face on these
cores (the pip build has no BLAS), holding the GIL all the while: a face appearing stalled
the analysis stage for several frames' worth of time. The same weights, read from
`dlib_face_recognition_resnet_model_v1.dat` and run as matrix products, take a fifth of
that, mostly with the GIL let go. The embedding is dlib's to within float rounding
(tests/test_dlib_resnet.py compares them on the installed faces), so the face filter's
discriminant, fitted on dlib's embeddings, and the identity threshold (0.6) carry over.

The network is dlib's published face-recognition ResNet (dlib's dnn_face_recognition_ex):
a 7x7/2 convolution and a 3x3/2 max pool, then residual blocks of two 3x3 convolutions each
(32 channels x3; 64 x4, 128 x3, 256 x3, 256 x1, the first of each group halving the size),
an average over what is left and a 128-wide linear layer. Every convolution is followed by
an affine layer (dlib's frozen batch norm), folded into the convolution here. A block that
halves the size adds its input average-pooled 2x2/2 (dlib's `add_prev` treats the smaller
operand's missing channels and pixels as zeros, at the high end). The input is the RGB chip
dlib aligns (`dlib.get_face_chip`, 150x150, padding 0.25) with each channel's stored mean
taken off and divided by 256.

The file is dlib's serialization of that network, read field by field (dlib/dnn/core.h,
layers.h, input.h, cuda/tensor.h and serialize.h say how each is written); a field that is
not what the architecture says makes the read fail with the file named.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from engines.protocols import beside_helper, detecting_in_background

CHIP = 150  # px: the aligned face chip the network takes
PADDING = 0.25  # the chip's margin around the face (dlib's default for the embedding)
BATCH = 4  # chips run together by `embed_many` (six at once: 18 MB more for the first layer)
EMBEDDING = 128  # the embedding's length


class DlibFileError(ValueError):
    """The file is not dlib's face-recognition ResNet as this reader knows it."""


class _Reader:
    """dlib's serialization primitives over a byte buffer."""

    def __init__(self, data: bytes, name: str) -> None:
        self.data, self.pos, self.name = data, 0, name

    def fail(self, what: str) -> DlibFileError:
        return DlibFileError(f"{self.name}: {what} at byte {self.pos}")

    def int(self) -> int:
        # A control byte (size in the low 4 bits, 0x80 for negative), then that many bytes,
        # least significant first.
        if self.pos >= len(self.data):
            raise self.fail("file ends")
        ctrl = self.data[self.pos]
        size = ctrl & 0x0F
        if size > 8 or ctrl & 0x70:
            raise self.fail(f"not an integer (control byte {ctrl:#x})")
        raw = self.data[self.pos + 1:self.pos + 1 + size]
        self.pos += 1 + size
        value = int.from_bytes(raw, "little")
        return -value if ctrl & 0x80 else value

    def string(self) -> str:
        n = self.int()
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("latin-1")

    def float(self) -> float:
        # Binary format: a 64-bit mantissa and a 16-bit exponent, both as integers.
        if self.pos < len(self.data) and self.data[self.pos] & 0x70:
            raise self.fail("a float in dlib's old text format")
        mantissa, exponent = self.int(), self.int()
        return float(mantissa) * 2.0 ** exponent

    def bool(self) -> bool:
        ch = self.data[self.pos:self.pos + 1]
        self.pos += 1
        if ch not in (b"0", b"1"):
            raise self.fail("not a bool")
        return ch == b"1"

    def tensor(self) -> np.ndarray:
        if self.int() != 2:
            raise self.fail("unknown tensor version")
        shape = tuple(self.int() for _ in range(4))
        n = int(np.prod(shape))
        end = self.pos + 4 * n
        if end > len(self.data):
            raise self.fail("file ends inside a tensor")
        values = np.frombuffer(self.data, "<f4", count=n, offset=self.pos).reshape(shape)
        self.pos = end
        return values  # a view of the file's bytes (read-only)

    def alias(self) -> tuple[int, ...]:
        if self.int() != 1:
            raise self.fail("unknown alias_tensor version")
        return tuple(self.int() for _ in range(4))

    def expect(self, *versions: str) -> str:
        found = self.string()
        if found not in versions:
            raise self.fail(f"expected {' or '.join(versions)}, found {found!r}")
        return found


# The residual blocks, from the input outwards: (channels, halves the size).
BLOCKS = [(32, False)] * 3 + [(64, True)] + [(64, False)] * 3 + [(128, True)] + [(128, False)] * 2 \
    + [(256, True)] + [(256, False)] * 2 + [(256, True)]


@dataclass
class Layer:
    kind: str  # con, affine, relu, max_pool, avg_pool, add_prev, fc
    spec: dict = field(default_factory=dict)  # what the file must hold (sizes, strides)
    weights: dict = field(default_factory=dict)  # what it holds


def _wrappers() -> list[tuple[str, Layer | None]]:
    """dlib's layer stack, outermost first: ("layer", details) for add_layer, ("tag", None)
    and ("skip", None) for the tag and skip layers (no fields of their own but a version)."""
    out: list[tuple[str, Layer | None]] = []

    def layer(kind: str, **spec: object) -> None:
        out.append(("layer", Layer(kind, dict(spec))))

    def block(n: int, stride: int) -> None:  # BN<con<N,3,3,1,1,relu<BN<con<N,3,3,s,s,S>>>>>
        layer("affine")
        layer("con", n=n, k=3, stride=1, pad=1)
        layer("relu")
        layer("affine")
        layer("con", n=n, k=3, stride=stride, pad=0 if stride != 1 else 1)

    layer("fc", n=128)
    layer("avg_pool", k=0, stride=1, pad=0)  # over everything
    for n, down in reversed(BLOCKS):
        layer("relu")
        layer("add_prev", tag=2 if down else 1)
        if down:  # add_prev2<avg_pool<2,2,2,2,skip1<tag2<block<N,2,tag1<S>>>>>>
            layer("avg_pool", k=2, stride=2, pad=0)
            out.append(("skip", None))
            out.append(("tag", None))
            block(n, 2)
        else:  # add_prev1<block<N,1,tag1<S>>>
            block(n, 1)
        out.append(("tag", None))
    layer("max_pool", k=3, stride=2, pad=0)
    layer("relu")
    layer("affine")
    layer("con", n=32, k=7, stride=2, pad=0)
    return out


def _details(r: _Reader, layer: Layer) -> None:
    kind, spec, w = layer.kind, layer.spec, layer.weights
    if kind == "con":
        version = r.expect("con_4", "con_5", "con_6")
        params = r.tensor()
        n, nr, nc, sy, sx, py, px = (r.int() for _ in range(7))
        filters, _ = r.alias(), r.alias()  # the filters' shape, the biases'
        for _ in range(4):
            r.float()  # learning-rate and weight-decay multipliers
        use_bias = r.bool() if version in ("con_5", "con_6") else True
        if version == "con_6":
            r.bool()  # use_relu (a fused relu: not in this network)
        want = (spec["n"], spec["k"], spec["k"], spec["stride"], spec["stride"], spec["pad"], spec["pad"])
        if (n, nr, nc, sy, sx, py, px) != want:
            raise r.fail(f"a convolution {(n, nr, nc, sy, sx, py, px)}, expected {want}")
        flat = params.ravel()
        size = int(np.prod(filters))
        w["filters"] = flat[:size].reshape(filters)
        w["bias"] = flat[size:size + n] if use_bias else np.zeros(n, np.float32)
    elif kind == "affine":
        version = r.expect("affine_", "affine_2")
        params = r.tensor().ravel()  # gamma, then beta
        n = int(np.prod(r.alias()))
        r.alias()
        w["gamma"], w["beta"] = params[:n], params[n:2 * n]
        r.int()  # mode (per channel)
        if version == "affine_2":
            r.bool()
    elif kind == "relu":
        if r.expect("relu_", "relu_2") == "relu_2":
            r.bool()
    elif kind in ("max_pool", "avg_pool"):
        r.expect(f"{kind}_2")
        got = tuple(r.int() for _ in range(6))
        want = (spec["k"], spec["k"], spec["stride"], spec["stride"], spec["pad"], spec["pad"])
        if got != want:
            raise r.fail(f"a {kind} {got}, expected {want}")
    elif kind == "add_prev":
        r.expect("add_prev_")
    elif kind == "fc":
        version = r.expect("fc_2", "fc_3")
        outputs, inputs = r.int(), r.int()
        params = r.tensor()
        r.alias()
        r.alias()
        if r.int() != 1:  # FC_NO_BIAS
            raise r.fail("a linear layer with a bias, expected none")
        for _ in range(4):
            r.float()
        if version == "fc_3":
            r.bool()
        if outputs != spec["n"]:
            raise r.fail(f"a linear layer of {outputs} outputs, expected {spec['n']}")
        w["matrix"] = params.reshape(-1)[:inputs * outputs].reshape(inputs, outputs)


def read_network(data: bytes, name: str = "dlib model") -> tuple[list[Layer], tuple[float, float, float]]:
    """The layers (input first, with their weights) and the input's channel means (R, G, B)."""
    r = _Reader(data, name)
    if r.int() != 1:
        raise r.fail("not a dlib network (add_loss_layer version)")
    if r.expect("loss_metric_", "loss_metric_2") == "loss_metric_2":
        r.float()
        r.float()
    stack = _wrappers()
    versions = []  # each wrapper's, outermost first (written before what it wraps)
    for i, (kind, _) in enumerate(stack):
        version = r.int()
        innermost = i == len(stack) - 1
        if kind == "layer" and not (2 <= version <= 3 if innermost else 1 <= version <= 2):
            raise r.fail(f"add_layer version {version}")
        if kind != "layer" and version != 1:
            raise r.fail(f"{kind} layer version {version}")
        versions.append(version)
    r.expect("input_rgb_image_sized")
    means = (r.float(), r.float(), r.float())
    if (r.int(), r.int()) != (CHIP, CHIP):
        raise r.fail(f"an input that is not {CHIP}x{CHIP}")
    layers: list[Layer] = []
    for i in range(len(stack) - 1, -1, -1):
        _, layer = stack[i]
        version = versions[i]
        if layer is None:  # a tag or skip layer: nothing after what it wraps
            continue
        _details(r, layer)
        r.bool(), r.bool(), r.bool()  # set up, gradient stale, output disabled
        r.tensor(), r.tensor()  # x_grad, cached output (empty in a saved model)
        if i == len(stack) - 1:
            r.tensor()  # grad_final
            if version >= 3:
                r.int()  # sample expansion factor
        elif version == 2:
            r.tensor()  # params_grad
        layers.append(layer)
    if r.pos != len(data):
        raise r.fail(f"{len(data) - r.pos} bytes left after the network")
    return layers, means


class DlibResNet:
    """The network with its weights, ready to run: `embed(chip)` is dlib's embedding of a
    150x150 RGB chip. numpy runs it (im2col and BLAS matrix products, which let the GIL
    go): about 12 ms a face on one core (AMD EPYC, 2026-12-04; 18 ms before its windows were
    copied channels-innermost, see `_conv`), against dlib's 130-200, with no runtime
    of its own to import. Where ONNX Runtime is installed the process runs the same network
    from its ONNX export instead (engines.dlib.onnx_embedding: 5-7 ms a face on one thread,
    for about 20 MB more memory, the runtime's own libraries). The affine layers are folded into
    the convolutions' weights, all in one buffer (22 MB, as dlib's own copy)."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            data = f.read()
        layers, means = read_network(data, path)
        convs = [layer for layer in layers if layer.kind == "con"]
        fc = next(layer for layer in layers if layer.kind == "fc")
        total = sum(c.weights["filters"].size + c.spec["n"] for c in convs) + fc.weights["matrix"].size
        store = np.empty(total, np.float32)  # one allocation: handed back whole when freed
        used = 0

        def take(shape: tuple[int, ...]) -> np.ndarray:
            nonlocal used
            size = int(np.prod(shape))
            out = store[used:used + size].reshape(shape)
            used += size
            return out

        def fold(con: Layer, aff: Layer) -> tuple[np.ndarray, np.ndarray, int, int, int]:
            f, b = con.weights["filters"], con.weights["bias"]
            g, beta = aff.weights["gamma"], aff.weights["beta"]
            n = f.shape[0]
            # (k x k x C, N): the order a window of the NHWC image is laid out in below.
            w = np.multiply(f.transpose(0, 2, 3, 1).reshape(n, -1).T, g[None, :], out=take((f[0].size, n)))
            bias = np.multiply(b, g, out=take((n,)))
            bias += beta
            return w, bias, con.spec["k"], con.spec["stride"], con.spec["pad"]

        # input first: the stem (con, affine, relu, max_pool), then each block as _wrappers
        # lays it out (con, affine, relu, con, affine, [avg_pool], add_prev, relu).
        self._stem = fold(layers[0], layers[1])
        self._blocks = []
        pos = 4
        for _, down in BLOCKS:
            a, b = fold(layers[pos], layers[pos + 1]), fold(layers[pos + 3], layers[pos + 4])
            self._blocks.append((a, b, down))
            pos += 5 + down + 2
        self._fc = take(fc.weights["matrix"].shape)
        self._fc[...] = fc.weights["matrix"]
        self._means = np.array(means, np.float32)
        self._warmed = False
        self._warm_lock = threading.Lock()
        del layers, convs, fc, data  # the file's bytes: only the folded copy stays

    @staticmethod
    def _conv(x: np.ndarray, conv: tuple[np.ndarray, np.ndarray, int, int, int]) -> np.ndarray:
        """One convolution (its affine folded in) of a batch of NHWC images."""
        w, bias, k, stride, pad = conv
        if pad:  # a zero border (np.pad does the same at several times the cost for these sizes)
            n, rows, cols, channels = x.shape
            padded = np.zeros((n, rows + 2 * pad, cols + 2 * pad, channels), np.float32)
            padded[:, pad:pad + rows, pad:pad + cols] = x
            x = padded
        # Each window as (k, k, C), channels innermost: copied out in runs of C floats (as the
        # view's own (C, k, k) it is copied a float at a time: 7x slower, half the network's time).
        windows = sliding_window_view(x, (k, k), axis=(1, 2))[:, ::stride, ::stride].transpose(0, 1, 2, 4, 5, 3)
        n, ho, wo = windows.shape[:3]
        y = windows.reshape(n * ho * wo, -1) @ w
        y += bias
        return y.reshape(n, ho, wo, -1)

    def warm(self) -> None:
        """Run one blank batch, once per network: a process's first batch of new faces took
        89 ms for six, the next ones 48-53 (glibc's malloc maps the first large buffers
        afresh and raises its threshold only once they are freed), and a live run drops the
        frames that come in while its first detection judges them."""
        with self._warm_lock:
            if not self._warmed:
                self._run(np.zeros((BATCH, CHIP, CHIP, 3), np.uint8))
                self._warmed = True

    def embed(self, chip: np.ndarray) -> np.ndarray:
        """The 128-d embedding (float32) of a (150, 150, 3) uint8 RGB chip."""
        if chip.shape != (CHIP, CHIP, 3):
            raise ValueError(f"a face chip is {CHIP}x{CHIP}x3 RGB, got {chip.shape}")
        return self._run(chip[None])[0]

    def embed_many(self, chips: np.ndarray) -> np.ndarray:
        """The (n, 128) embeddings of (n, 150, 150, 3) uint8 RGB chips, BATCH at a time: the
        matrix products of the small late layers are longer, so a batch costs less than its
        chips one by one (six faces: 36-42 against 48 ms). Each row is what `embed` gives for
        its chip to within float rounding (BLAS sums a longer product in other blocks).

        In line (not on a background detection's thread, engines.protocols), the chips'
        second half runs on a helper thread while this one runs the first: the stages are
        waiting for this detection, and BLAS has one thread (pipeline.blas_threads). Six
        faces: 28-29 ms, against 54 in one thread and 38 with BLAS's two threads."""
        if chips.ndim != 4 or chips.shape[1:] != (CHIP, CHIP, 3):
            raise ValueError(f"face chips are (n, {CHIP}, {CHIP}, 3) RGB, got {chips.shape}")
        if not len(chips):
            return np.empty((0, EMBEDDING), np.float32)
        if len(chips) < 2 or detecting_in_background():
            return self._batched(chips)
        half = (len(chips) + 1) // 2
        first, second = beside_helper(lambda: self._batched(chips[:half]), lambda: self._batched(chips[half:]),
                                      "fs-embed")
        return np.concatenate([first, second])

    def _batched(self, chips: np.ndarray) -> np.ndarray:
        return np.concatenate([self._run(chips[i:i + BATCH]) for i in range(0, len(chips), BATCH)])

    def _run(self, chips: np.ndarray) -> np.ndarray:
        """One batch of (n, 150, 150, 3) uint8 RGB chips through the network: numpy here, an
        ONNX runtime in engines.dlib.onnx_embedding's subclass (`_forward`)."""
        return self._forward(chips)

    def _forward(self, chips: np.ndarray) -> np.ndarray:
        x = (chips.astype(np.float32) - self._means) * np.float32(1 / 256)
        x = np.maximum(self._conv(x, self._stem), 0)
        x = sliding_window_view(x, (3, 3), axis=(1, 2))[:, ::2, ::2].max(axis=(4, 5))  # max pool 3x3/2
        for first, second, down in self._blocks:
            y = self._conv(np.maximum(self._conv(x, first), 0), second)
            if down:  # the input average-pooled 2x2/2
                h = (x.shape[1] - 2) // 2 + 1
                x = x[:, :2 * h, :2 * h].reshape(len(x), h, 2, h, 2, -1).mean(axis=(2, 4))
            if x.shape == y.shape:
                y += x
            else:
                # dlib's add: the larger size and channels; what one lacks counts as zero.
                side = max(y.shape[1], x.shape[1])
                out = np.zeros((len(y), side, side, max(y.shape[3], x.shape[3])), np.float32)
                out[:, :y.shape[1], :y.shape[2], :y.shape[3]] += y
                out[:, :x.shape[1], :x.shape[2], :x.shape[3]] += x
                y = out
            x = np.maximum(y, 0, out=y)
        return (x.mean(axis=(1, 2)) @ self._fc).astype(np.float32)
