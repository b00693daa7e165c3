"""Cost-equivalent stand-ins for the standard neural models (no real weights can be fetched).

`python tools/cost_models.py OUTDIR` writes det_10g.onnx, w600k_r50.onnx, inswapper_128.onnx
(and its float16 twin), 2dfan4.onnx, simswap_256.onnx, simswap_unofficial_512.onnx,
xseg_1.onnx and bisenet_resnet_34.onnx: seeded random weights, the real files' I/O (names,
shapes, dynamic axes), and about the real models' multiply-accumulates, spent in real
Conv/Gemm layers so that ONNX Runtime's cost (memory traffic, kernel choice, threading) is representative. It prints the
MACs it counts in each built graph next to the estimate for the real model.

Estimates (GMACs = 1e9 multiply-accumulates; 1 MAC = 2 FLOPs):

- **SCRFD-10GF (det_10g, at 640x640): 13.3 GMACs, +-20%.** The SCRFD paper/README give
  9.98 "GFlops" for SCRFD-10GF (10.18 for ResNet-10GF) at VGA, 640x480. Those figures come
  from mmcv's counter, which counts MACs: the same table lists RetinaFace-R50 at 37.6
  "GFlops", which only fits MACs (ResNet-50 is 4.1 GMACs at 224^2, x6.1 for VGA's pixels
  = 25, plus FPN/SSH heads). Our detector runs at 640x640: 9.98 x 640/480 = 13.3. The _KPS
  variant adds a small keypoint head (a few %). Our stand-in: a basic-block ResNet backbone
  (strides 4-32), a 3-level FPN and per-stride stacked 3x3 heads with score/box/keypoint
  convs, sized to that total. Its layer widths are not SCRFD's searched ones.
- **ArcFace IResNet-50 (w600k_r50, 112x112): 6.3 GMACs, +-5%.** OpenVINO's model card for
  LResNet50E-IR gives 12.6 GFLOPs = 6.3 GMACs; counting insightface's `iresnet50` layer
  by layer (3x3 stem at 112, stages [3, 4, 14, 3] x [64, 128, 256, 512] whose first block
  runs its first conv at the input resolution, FC 512*7*7 -> 512) gives 6.30 GMACs too.
  The stand-in IS that architecture (PReLU, residual adds; BatchNorm left out: it is
  folded or elementwise, <1% of the time).
- **inswapper_128 (128x128): ~175 GMACs, +-25%.** insightface never published the network;
  the architecture below is the one read off the ONNX file (ReSwapper's reproduction,
  github.com/somanchiu/ReSwapper, `StyleTransferModel_128.py`): encoder conv7x7 3->128 and
  conv3x3 128->256 at 128^2, conv3x3/2 256->512 (64^2), conv3x3/2 512->1024 (32^2);
  6 style blocks of two conv3x3 1024->1024 at 32^2, each followed by instance norm and an
  AdaIN scale/shift from Gemm(latent 512 -> 2048); decoder: up x2, conv3x3 1024->512 (64^2),
  up x2, conv3x3 512->256 and 256->128 (128^2), conv7x7 128->3, tanh. That is 116 GMACs in
  the style blocks, 19.3 + 19.3 in the two big decoder convs, 14.5 in the encoder: 174.6.
  Cross-check: it has 138M parameters = 552 MB of float32, and the published
  inswapper_128.onnx is 554 MB (the 2 MB difference is about emap's 1 MB plus biases).
  The uncertainty is whether the real file matches this layer for layer; the size match
  makes a gross error (2x) unlikely. The stand-in is that architecture.
- **2dfan4 (FAN, 4 stacked hourglasses, 256x256): ~25 GMACs, +-25%.** From the FAN paper
  (Bulat & Tzimiropoulos, ICCV 2017) and its reference code (face-alignment): conv7x7/2
  3->64, ConvBlock(64,128) at 128^2, avg-pool, ConvBlock(128,128), ConvBlock(128,256) at
  64^2 (2.95 GMACs); then per stack an hourglass of depth 4 (13 ConvBlocks(256,256): 1 at
  64^2, 3 each at 32, 16, 8, 4 -> 3.3 GMACs), a ConvBlock at 64^2 (1.66), 1x1 convs
  (0.7): 5.65 GMACs a stack, 25.2 in all. A ConvBlock(256,256) is the hierarchical
  3x3 256->128->64->64 block (405k MACs per pixel). Cross-check: ~24M parameters, the
  published 2dfan4.onnx is ~98 MB. Exported variants may differ a little.

- **simswap_256 (256x256): 62.8 GMACs, +-10%.** SimSwap's published generator
  (neuralchen/SimSwap, models/fs_networks_fix.py, `Generator_Adain_Upsample` with 9 blocks,
  not deep, as its 224/256 models are built), counted at 256: conv7x7 3->64 (0.6), three
  stride-2 conv3x3 to 512 channels at 128^2, 64^2, 32^2 (1.2 each), 9 residual blocks of
  two conv3x3 512->512 at 32^2 (43.5), bilinear x2 + conv3x3 512->256, 256->128, 128->64
  (4.8 each), conv7x7 64->3 (0.6). The tolerance is for FaceFusion's export, which we
  cannot open here.
- **simswap_unofficial_512 (512x512): 133 GMACs, +-10%, if it is the deep layout.** The
  same generator at 512 with the fourth down- and up-sampling (512->512 at 32^2 and 64^2)
  that SimSwap's training code adds with `--Gdeep`, which its README gives for 512 models:
  conv7x7 (2.5), downs (4.8, 4.8, 4.8, 2.4), blocks (43.5), ups (9.7, 19.3, 19.3, 19.3),
  conv7x7 (2.5). Trained without `--Gdeep` it would be 251 GMACs (its blocks at 64^2).
- **xseg_1 (256x256, the occlusion mask): 13.8 GMACs, +-10%.** DeepFaceLab's XSeg
  (core/leras/models/XSeg.py), which FaceFusion's xseg files are trained with (NHWC input,
  as DeepFaceLab's TensorFlow graphs), base 32 channels, counted at 256: the encoder's 15
  conv3x3 4.5, the Dense pair 0.004, the decoder's 6 stride-2 transposed conv3x3 (1.0: a
  transposed conv costs its input's pixels, not its output's) and 15 conv3x3 (8.2).
- **bisenet_resnet_34 (512x512, the region mask): 23 GMACs, +-15%.** BiSeNet as the
  face-parsing ports build it (zllrunning's face-parsing.PyTorch, with a ResNet-34
  backbone in the later ports FaceFusion's file comes from): ResNet-34 at 512 (3.6 GMACs at
  224^2 x (512/224)^2 = 19.1: stem 0.6, its four stages 3.6, 4.6, 7.0, 3.3) and the context
  path, fusion and head at 1/32-1/8 (3.9, of which the head's conv3x3 256->256 at 64^2 is
  2.4). The tolerance is for the port's head widths, which we cannot read off the file.

What is real cost and what is a stand-in:

- Every conv/Gemm listed above runs on the real input and its result reaches an output,
  so ONNX Runtime cannot prune it; nothing is replaced by a cheaper op.
- SCRFD: the decoded detections come from tests/synth_scrfd.py's cheap deterministic
  head (average pool + local contrast), spliced into this graph. The heavy heads' outputs
  are added to its score logits multiplied by zero: they cost the full price but do not
  decide what is detected, so face counts and places stay plausible on our clips.
- 2dfan4: the 68 landmarks are a fixed mean-face layout on the 64 grid (they follow the
  crop, so they land on the tracked box) and the heatmaps a constant 0.9; the hourglass
  output reaches both through a multiply by zero.
- ArcFace and inswapper: their real outputs (random-weight embedding; a random-weight
  128x128 image in [0, 1] that depends on target and latent) are used as they are.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

OPSET = 13
IR_VERSION = 8  # readable by every onnxruntime we support


@dataclass(frozen=True)
class Estimate:
    """The real model's cost, as documented above."""

    file: str
    gmacs: float
    tolerance: float  # relative uncertainty of the estimate
    input_shapes: dict[str, list[int]]  # concrete shapes at which `gmacs` holds
    source: str


def _swapper_inputs(size: int) -> dict[str, list[int]]:
    """A swapper's inputs at `size`: the aligned crop and the source vector."""
    return {"target": [1, 3, size, size], "source": [1, 512]}


ESTIMATES: dict[str, Estimate] = {e.file: e for e in (
    Estimate("det_10g.onnx", 13.3, 0.20, {"input.1": [1, 3, 640, 640]},
             "SCRFD README 9.98 G(MAC) at 640x480, x4/3 for 640x640"),
    Estimate("w600k_r50.onnx", 6.3, 0.05, {"input.1": [1, 3, 112, 112]},
             "OpenVINO LResNet50E-IR 12.6 GFLOPs; iresnet50 counted"),
    Estimate("inswapper_128.onnx", 174.6, 0.25, _swapper_inputs(128),
             "ReSwapper's reading of the graph; 138M params ~ 554 MB file"),
    Estimate("inswapper_128_fp16.onnx", 174.6, 0.25, _swapper_inputs(128), "inswapper_128's, in float16"),
    Estimate("2dfan4.onnx", 25.2, 0.25, {"input": [1, 3, 256, 256]},
             "FAN paper / face-alignment code, 4 hourglasses"),
    Estimate("simswap_256.onnx", 62.8, 0.10, _swapper_inputs(256),
             "SimSwap's Generator_Adain_Upsample, 9 blocks, counted"),
    Estimate("simswap_unofficial_512.onnx", 133.0, 0.10, _swapper_inputs(512),
             "the same generator at 512 with --Gdeep, counted"),
    Estimate("xseg_1.onnx", 13.8, 0.10, {"input": [1, 256, 256, 3]}, "DeepFaceLab's XSeg, base 32, counted"),
    Estimate("bisenet_resnet_34.onnx", 23.0, 0.15, {"input": [1, 3, 512, 512]},
             "ResNet-34 at 512 (19.1) + BiSeNet's heads, counted"),
)}


# -- graph building -------------------------------------------------------------------------


class _Graph:
    """Accumulates nodes and seeded initializers; names are generated, so blocks compose."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, stem: str) -> str:
        self._n += 1
        return f"{stem}_{self._n}"

    def const(self, value: np.ndarray, stem: str = "c") -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], stem: str | None = None, **attrs: object) -> str:
        out = self.name(stem or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def weight(self, shape: tuple[int, ...], gain: float = 1.0) -> np.ndarray:
        # He-scaled so that deep random stacks keep activations O(1): no overflow to inf and
        # no decay into denormals, either of which would make the timing unrepresentative.
        fan_in = int(np.prod(shape[1:]))
        w = self.rng.standard_normal(shape, dtype=np.float32)
        w *= np.float32(gain * math.sqrt(2.0 / fan_in))
        return w

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, act: str | None = "relu",
             gain: float = 1.0, reflect: bool = False) -> str:
        pad = k // 2
        w = self.const(self.weight((cout, cin, k, k), gain), "w")
        b = self.const(np.zeros(cout, np.float32), "b")
        if reflect:  # inswapper's 7x7 convs and SimSwap's pad by reflection, not zeros
            x = self.op("Pad", [x, self.const(np.array([0, 0, pad, pad, 0, 0, pad, pad], np.int64), "pads")],
                        mode="reflect")
            pad = 0
        y = self.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
        return self.activate(y, act, cout)

    def activate(self, x: str, act: str | None, channels: int = 0) -> str:
        if act is None:
            return x
        if act == "relu":
            return self.op("Relu", [x])
        if act == "lrelu":
            return self.op("LeakyRelu", [x], alpha=0.2)
        if act == "prelu":
            return self.op("PRelu", [x, self.const(np.full((channels, 1, 1), 0.25, np.float32), "slope")])
        raise ValueError(f"unknown activation {act!r}")

    def up2(self, x: str, mode: str = "linear") -> str:
        scales = self.const(np.array([1, 1, 2, 2], np.float32), "scales")
        return self.op("Resize", [x, "", scales], mode=mode)

    def zero_link(self, x: str, axes: list[int]) -> str:
        """mean(x over `axes`) * 0: keeps `x`'s whole subgraph alive at no numeric effect."""
        m = self.op("ReduceMean", [x], axes=axes, keepdims=1)
        return self.op("Mul", [m, self.const(np.array(0.0, np.float32), "zero")])

    def model(self, name: str, inputs: list[onnx.ValueInfoProto],
              outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="facestream-cost-models")
        model.ir_version = IR_VERSION
        return model


def _save(model: onnx.ModelProto, path: str | os.PathLike[str]) -> Path:
    onnx.checker.check_model(model)  # by proto: fine below 2 GB, which all of these are
    onnx.save(model, str(path))
    return Path(path)


# -- SCRFD-10GF -----------------------------------------------------------------------------

# Backbone stages (channels, basic blocks) at strides 4, 8, 16, 32; neck and head widths.
# Tuned so the counter gives ~13.3 GMACs at 640x640.
SCRFD_STEM = 32
SCRFD_STAGES = ((64, 2), (96, 3), (160, 3), (256, 2))
SCRFD_NECK = 80
SCRFD_HEAD_CONVS = 3
SCRFD_STRIDES = (8, 16, 32)


def _basic_block(g: _Graph, x: str, cin: int, cout: int, stride: int, act: str = "relu") -> str:
    y = g.conv(x, cin, cout, 3, stride, act)
    y = g.conv(y, cout, cout, 3, 1, None, gain=0.3)  # small residual branch: bounded growth
    skip = x if (cin == cout and stride == 1) else g.conv(x, cin, cout, 1, stride, None)
    return g.activate(g.op("Add", [y, skip]), act, cout)


def _scrfd_trunk(g: _Graph, x: str) -> dict[int, str]:
    """Backbone + FPN + stacked heads; returns, per stride, a [1,1,h,w] zero-valued link."""
    y = g.conv(x, 3, SCRFD_STEM, 3, 2)  # 320
    y = g.conv(y, SCRFD_STEM, SCRFD_STEM, 3, 1)
    y = g.conv(y, SCRFD_STEM, SCRFD_STAGES[0][0], 3, 2)  # stride 4
    cin = SCRFD_STAGES[0][0]
    feats: list[tuple[str, int]] = []
    for i, (cout, blocks) in enumerate(SCRFD_STAGES):
        for b in range(blocks):
            y = _basic_block(g, y, cin, cout, 2 if (b == 0 and i > 0) else 1)
            cin = cout
        if i > 0:
            feats.append((y, cout))  # strides 8, 16, 32
    lateral = [g.conv(f, c, SCRFD_NECK, 1, 1, None) for f, c in feats]
    for i in (1, 0):  # top-down
        lateral[i] = g.op("Add", [lateral[i], g.up2(lateral[i + 1], "nearest")])
    links: dict[int, str] = {}
    for stride, lat in zip(SCRFD_STRIDES, lateral):
        h = g.conv(lat, SCRFD_NECK, SCRFD_NECK, 3)
        for _ in range(SCRFD_HEAD_CONVS):
            h = g.conv(h, SCRFD_NECK, SCRFD_NECK, 3)
        outs = [g.conv(h, SCRFD_NECK, 2 * width, 3, 1, None) for width in (1, 4, 10)]
        parts = [g.zero_link(o, [1]) for o in outs]
        links[stride] = g.op("Add", [g.op("Add", parts[:2]), parts[2]])
    return links


def build_scrfd(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """det_10g.onnx stand-in: `input.1` [1,3,H,W] (dynamic H, W) -> 9 outputs in insightface's order."""
    from tools.synth.scrfd import build_scrfd_model

    with tempfile.TemporaryDirectory() as tmp:
        cheap = onnx.load(str(build_scrfd_model(Path(tmp) / "cheap.onnx", seed=seed)))
    g = _Graph(seed + 1)
    links = _scrfd_trunk(g, "input.1")
    nodes = list(cheap.graph.node)
    for stride, link in links.items():
        # The cheap head's logit `logit{s}` feeds its sigmoid: re-route it through + link.
        logit = f"logit{stride}"
        for node in nodes:
            for j, name in enumerate(node.output):
                if name == logit:
                    node.output[j] = f"{logit}_cheap"
        g.nodes.append(helper.make_node("Add", [f"{logit}_cheap", link], [logit]))
    g.nodes = nodes + g.nodes  # topological order: the cheap head's producers come first
    g.inits = list(cheap.graph.initializer) + g.inits
    model = g.model("cost_scrfd_10g", list(cheap.graph.input), list(cheap.graph.output))
    # The spliced graph is in dependency order except the cheap sigmoids now read the Adds
    # appended last; sort topologically so every consumer follows its producer.
    _toposort(model.graph)
    return _save(model, path)


def _toposort(graph: onnx.GraphProto) -> None:
    known = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending = list(graph.node)
    ordered: list[onnx.NodeProto] = []
    while pending:
        rest = []
        for node in pending:
            if all(i in known for i in node.input):
                ordered.append(node)
                known.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):
            raise ValueError(f"graph has a cycle or a missing input near {rest[0].name or rest[0].op_type}")
        pending = rest
    del graph.node[:]
    graph.node.extend(ordered)


# -- ArcFace IResNet-50 ------------------------------------------------------------------------

IRESNET50 = ((64, 3), (128, 4), (256, 14), (512, 3))


def build_arcface(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """w600k_r50.onnx stand-in: `input.1` [N,3,112,112] -> `683` [N,512], insightface's iresnet50."""
    g = _Graph(seed)
    y = g.conv("input.1", 3, 64, 3, 1, "prelu")
    cin = 64
    for cout, blocks in IRESNET50:
        for b in range(blocks):
            stride = 2 if b == 0 else 1
            # IBasicBlock: conv3x3 (stride 1) -> PReLU -> conv3x3 (stride s), + 1x1/s downsample
            r = g.conv(y, cin, cout, 3, 1, "prelu")
            r = g.conv(r, cout, cout, 3, stride, None, gain=0.3)
            skip = g.conv(y, cin, cout, 1, stride, None) if b == 0 else y
            y = g.op("Add", [r, skip])
            cin = cout
    flat = g.op("Flatten", [y], axis=1)
    fc_w = g.const((g.rng.standard_normal((512 * 7 * 7, 512), dtype=np.float32) / np.float32(112.0)), "fc_w")
    g.nodes.append(helper.make_node("Gemm", [flat, fc_w, g.const(np.zeros(512, np.float32), "fc_b")], ["683"]))
    model = g.model("cost_arcface_r50",
                    [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["N", 3, 112, 112])],
                    [helper.make_tensor_value_info("683", TensorProto.FLOAT, ["N", 512])])
    return _save(model, path)


# -- inswapper_128 -----------------------------------------------------------------------------


def _styled_conv(g: _Graph, h: str, ch: int, relu: bool, shared: dict[int, tuple[str, str, str]],
                 reflect: bool = False) -> str:
    """conv3x3 ch->ch (its border reflected when `reflect`), instance norm, then the
    identity's scale and shift from Gemm(source 512 -> 2 ch) (AdaIN, as inswapper's and
    SimSwap's style blocks do), and a ReLU when `relu`. `shared` holds, per channel count,
    the norm's scale and bias and the reshape's target, made once a graph."""
    if ch not in shared:
        shared[ch] = (g.const(np.ones(ch, np.float32), "in_scale"), g.const(np.zeros(ch, np.float32), "in_bias"),
                      g.const(np.array([-1, ch, 1, 1], np.int64), "style_shape"))
    ones, zeros, shape = shared[ch]
    h = g.conv(h, ch, ch, 3, 1, None, reflect=reflect)
    h = g.op("InstanceNormalization", [h, ones, zeros], epsilon=1e-6)
    w = g.const(g.rng.standard_normal((512, 2 * ch), dtype=np.float32) * np.float32(0.02), "style_w")
    b = g.const(np.concatenate([np.ones(ch), np.zeros(ch)]).astype(np.float32), "style_b")
    style = g.op("Gemm", ["source", w, b])
    halves = [g.op("Reshape", [g.op("Slice", [style, g.const(np.array([lo], np.int64)),
                                              g.const(np.array([lo + ch], np.int64)),
                                              g.const(np.array([1], np.int64))]), shape])
              for lo in (0, ch)]
    h = g.op("Add", [g.op("Mul", [h, halves[0]]), halves[1]])
    return g.op("Relu", [h]) if relu else h


def _zero_to_one(g: _Graph, x: str) -> None:
    """The graph's `output`: tanh(x) mapped to 0..1."""
    y = g.op("Tanh", [x])
    g.nodes.append(helper.make_node("Mul", [g.op("Add", [y, g.const(np.array(1.0, np.float32))]),
                                            g.const(np.array(0.5, np.float32))], ["output"]))


def _swapper_model(g: _Graph, name: str, size: int) -> onnx.ModelProto:
    return g.model(name,
                   [helper.make_tensor_value_info("target", TensorProto.FLOAT, [1, 3, size, size]),
                    helper.make_tensor_value_info("source", TensorProto.FLOAT, [1, 512])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, size, size])])


def build_inswapper(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """inswapper_128.onnx stand-in: target [1,3,128,128] 0..1, source [1,512] -> output
    [1,3,128,128] in 0..1; a 512x512 `emap` is the last initializer (read by insightface)."""
    g = _Graph(seed)
    # The real graph takes the target in [0, 1] and works on [-1, 1] internally.
    x = g.op("Sub", [g.op("Mul", ["target", g.const(np.array(2.0, np.float32))]),
                     g.const(np.array(1.0, np.float32))])
    x = g.conv(x, 3, 128, 7, 1, "lrelu", reflect=True)
    x = g.conv(x, 128, 256, 3, 1, "lrelu")
    x = g.conv(x, 256, 512, 3, 2, "lrelu")
    x = g.conv(x, 512, 1024, 3, 2, "lrelu")  # 32x32
    shared: dict[int, tuple[str, str, str]] = {}
    for _ in range(6):
        x = g.op("Add", [_styled_conv(g, _styled_conv(g, x, 1024, True, shared), 1024, False, shared), x])
    x = g.conv(g.up2(x), 1024, 512, 3, 1, "lrelu")  # 64x64
    x = g.conv(g.up2(x), 512, 256, 3, 1, "lrelu")  # 128x128
    x = g.conv(x, 256, 128, 3, 1, "lrelu")
    x = g.conv(x, 128, 3, 7, 1, None, reflect=True)
    _zero_to_one(g, x)
    emap = g.rng.standard_normal((512, 512), dtype=np.float32) / np.float32(math.sqrt(512))
    g.inits.append(numpy_helper.from_array(emap, "emap"))  # must stay last: initializer[-1]
    return _save(_swapper_model(g, "cost_inswapper_128", 128), path)


def build_inswapper_fp16(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """inswapper_128_fp16.onnx stand-in: inswapper_128's, its weights (emap too) in float16
    and its arithmetic in float16 behind float32 I/O, as the published fp16 export."""
    built = build_inswapper(path, seed)
    return _save(_float16(onnx.load(str(built))), built)


def _float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` computing in float16: its float initializers converted (not Resize's scales,
    which must stay float32), its float32 inputs cast on the way in and its outputs on the
    way out, under the same names."""
    g = model.graph
    keep = {n.input[2] for n in g.node if n.op_type == "Resize" and len(n.input) > 2}
    inits = [numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name)
             if t.data_type == TensorProto.FLOAT and t.name not in keep else t for t in g.initializer]
    ins, outs = [i.name for i in g.input], [o.name for o in g.output]
    body = list(g.node)
    for node in body:
        node.input[:] = [f"{x}_16" if x in ins else x for x in node.input]
        node.output[:] = [f"{x}_16" if x in outs else x for x in node.output]
    nodes = ([helper.make_node("Cast", [x], [f"{x}_16"], to=TensorProto.FLOAT16) for x in ins] + body
             + [helper.make_node("Cast", [f"{x}_16"], [x], to=TensorProto.FLOAT) for x in outs])
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(inits)
    return model


# -- SimSwap -----------------------------------------------------------------------------------


def build_simswap(path: str | os.PathLike[str], seed: int = 0, size: int = 256, deep: bool = False) -> Path:
    """simswap_256.onnx / simswap_unofficial_512.onnx stand-in: target [1,3,size,size]
    (normalised by the swapper), source [1,512] (crossface_simswap's) -> output
    [1,3,size,size] in 0..1. SimSwap's published generator: reflect-padded conv7x7 3->64,
    three stride-2 conv3x3 to 512 channels (a fourth, 512->512, when `deep`), nine residual
    blocks of two reflect-padded conv3x3 512->512 each followed by instance norm and the
    identity's AdaIN, then bilinear x2 + conv3x3 back up (512->512 first when `deep`) to 64
    channels and a reflect-padded conv7x7 64->3. BatchNorm is folded into the convs."""
    g = _Graph(seed)
    x = g.conv("target", 3, 64, 7, 1, "relu", reflect=True)
    for cin, cout in ((64, 128), (128, 256), (256, 512)) + (((512, 512),) if deep else ()):
        x = g.conv(x, cin, cout, 3, 2, "relu")
    shared: dict[int, tuple[str, str, str]] = {}
    for _ in range(9):
        y = _styled_conv(g, x, 512, True, shared, reflect=True)
        x = g.op("Add", [_styled_conv(g, y, 512, False, shared, reflect=True), x])
    for cin, cout in (((512, 512),) if deep else ()) + ((512, 256), (256, 128), (128, 64)):
        x = g.conv(g.up2(x), cin, cout, 3, 1, "relu")
    x = g.conv(x, 64, 3, 7, 1, None, reflect=True)
    _zero_to_one(g, x)
    return _save(_swapper_model(g, f"cost_simswap_{size}", size), path)


def build_simswap_512(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """simswap_unofficial_512.onnx stand-in: SimSwap's generator at 512 with the fourth
    down- and up-sampling (the training code's --Gdeep, which its README gives for 512)."""
    return build_simswap(path, seed, size=512, deep=True)


# -- XSeg (xseg_1/2/3) -----------------------------------------------------------------------

XSEG_BASE = 32  # DeepFaceLab's XSegNet: XSeg(in 3, base 32, out 1) at 256


def build_xseg(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """xseg_1.onnx stand-in: input [1,256,256,3] BGR 0..1 -> output [1,256,256,1] in 0..1.
    DeepFaceLab's XSeg (core/leras/models/XSeg.py), base 32 channels: conv3x3 blocks of
    2, 2, 2, 3, 3, 3 at 256 down to 8 px (c, c, 2c, 4c, 8c, 8c, 8c), each stage then
    halved, Dense 4*4*8c -> 512 -> 4*4*8c, and a U-Net decoder of stride-2 transposed
    conv3x3 and conv3x3 blocks over the encoder's skips. Its FRN+TLU activation (elementwise)
    is a ReLU here, its BlurPool (a small depthwise blur) an average pool."""
    g = _Graph(seed)
    c = XSEG_BASE
    x = g.op("Transpose", ["input"], perm=[0, 3, 1, 2])
    skips = []
    stages = [(3, c, 2), (c, 2 * c, 2), (2 * c, 4 * c, 2), (4 * c, 8 * c, 3), (8 * c, 8 * c, 3), (8 * c, 8 * c, 3)]
    for cin, cout, n in stages:
        for k in range(n):
            x = g.conv(x, cin if k == 0 else cout, cout, 3, 1, "relu")
        skips.append((x, cout))
        x = g.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Flatten", [x])
    x = g.op("Gemm", [x, g.const(g.weight((16 * 8 * c, 512)), "w"), g.const(np.zeros(512, np.float32), "b")])
    x = g.op("Gemm", [x, g.const(g.weight((512, 16 * 8 * c)), "w"), g.const(np.zeros(16 * 8 * c, np.float32), "b")])
    x = g.op("Reshape", [x, g.const(np.array([1, 8 * c, 4, 4], np.int64), "shape")])
    # Decoder, deepest first: (channels in, up to, block channels, blocks after the join)
    ups = [(8 * c, 4 * c, 8 * c, 3), (8 * c, 4 * c, 8 * c, 3), (8 * c, 4 * c, 8 * c, 3),
           (8 * c, 4 * c, 4 * c, 2), (4 * c, 2 * c, 2 * c, 2), (2 * c, c, c, 2)]
    for (cin, cup, cout, n), (skip, cskip) in zip(ups, reversed(skips)):
        w = g.const(g.weight((cin, cup, 3, 3)), "w")
        x = g.op("Relu", [g.op("ConvTranspose", [x, w, g.const(np.zeros(cup, np.float32), "b")],
                               kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])])
        x = g.op("Concat", [x, skip], axis=1)
        for k in range(n):
            x = g.conv(x, cup + cskip if k == 0 else cout, cout, 3, 1, "relu")
    x = g.op("Sigmoid", [g.conv(x, c, 1, 3, 1, None)])
    g.nodes.append(helper.make_node("Transpose", [x], ["output"], perm=[0, 2, 3, 1]))
    model = g.model("cost_xseg",
                    [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 256, 256, 3])],
                    [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 256, 256, 1])])
    return _save(model, path)


# -- BiSeNet (bisenet_resnet_34) -------------------------------------------------------------


def _attention(g: _Graph, x: str, ch: int, hidden: int | None = None) -> str:
    """x times a channel attention from its global mean (1x1 convs, sigmoid), as BiSeNet's
    ARM (one conv) and FFM (two, through `hidden` channels) weigh their features."""
    a = g.op("GlobalAveragePool", [x])
    if hidden:
        a = g.conv(g.conv(a, ch, hidden, 1, 1, "relu"), hidden, ch, 1, 1, None)
    else:
        a = g.conv(a, ch, ch, 1, 1, None)
    return g.op("Mul", [x, g.op("Sigmoid", [a])])


def build_bisenet(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """bisenet_resnet_34.onnx stand-in: input [1,3,512,512] -> output [1,19,512,512] logits.
    BiSeNet as the face-parsing ports build it: a ResNet-34 (basic blocks 3, 4, 6, 3; 64-512
    channels; strides 4-32), a context path (global mean and attention refinements of the
    1/32 and 1/16 features, each summed, upsampled and a conv3x3 128->128), a fusion of the
    1/8 features (concat, 1x1 to 256, attention), and the head: conv3x3 256->256, 1x1 to
    19 classes at 1/8, upsampled x8. BatchNorm is folded into the convs."""
    g = _Graph(seed)
    x = g.conv("input", 3, 64, 7, 2, "relu")
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    feats = []
    cin = 64
    for cout, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for k in range(blocks):
            x = _basic_block(g, x, cin, cout, stride if k == 0 else 1)
            cin = cout
        feats.append(x)
    f8, f16, f32 = feats[1], feats[2], feats[3]
    tail = g.conv(g.op("GlobalAveragePool", [f32]), 512, 128, 1, 1, "relu")
    up32 = g.op("Add", [_attention(g, g.conv(f32, 512, 128, 3, 1, "relu"), 128), tail])  # broadcast
    up32 = g.conv(g.up2(up32, "nearest"), 128, 128, 3, 1, "relu")  # 1/16
    up16 = g.op("Add", [_attention(g, g.conv(f16, 256, 128, 3, 1, "relu"), 128), up32])
    up16 = g.conv(g.up2(up16, "nearest"), 128, 128, 3, 1, "relu")  # 1/8
    fused = g.conv(g.op("Concat", [f8, up16], axis=1), 256, 256, 1, 1, "relu")
    fused = g.op("Add", [_attention(g, fused, 256, 64), fused])
    logits = g.conv(g.conv(fused, 256, 256, 3, 1, "relu"), 256, 19, 1, 1, None)
    scales = g.const(np.array([1, 1, 8, 8], np.float32), "scales")
    g.nodes.append(helper.make_node("Resize", [logits, "", scales], ["output"], mode="linear"))
    model = g.model("cost_bisenet_resnet_34",
                    [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 512, 512])],
                    [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 19, 512, 512])])
    return _save(model, path)


# -- 2dfan4 ------------------------------------------------------------------------------------


def _conv_block(g: _Graph, x: str, cin: int, cout: int) -> str:
    """FAN's hierarchical ConvBlock: 3x3 cin->cout/2->cout/4->cout/4, concatenated, + skip."""
    a = g.conv(g.op("Relu", [x]), cin, cout // 2, 3, 1, None, gain=0.5)
    b = g.conv(g.op("Relu", [a]), cout // 2, cout // 4, 3, 1, None, gain=0.5)
    c = g.conv(g.op("Relu", [b]), cout // 4, cout // 4, 3, 1, None, gain=0.5)
    cat = g.op("Concat", [a, b, c], axis=1)
    skip = x if cin == cout else g.conv(g.op("Relu", [x]), cin, cout, 1, 1, None)
    return g.op("Add", [cat, skip])


def _hourglass(g: _Graph, x: str, depth: int) -> str:
    up1 = _conv_block(g, x, 256, 256)
    low = _conv_block(g, g.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2]), 256, 256)
    low = _hourglass(g, low, depth - 1) if depth > 1 else _conv_block(g, low, 256, 256)
    low = _conv_block(g, low, 256, 256)
    return g.op("Add", [up1, g.up2(low, "nearest")])


def mean_face_68() -> np.ndarray:
    """A rough 68-point mean face (dlib/iBUG order) in box units: x, y in [0, 1]."""
    t = np.linspace(0, np.pi, 17)
    jaw = np.stack([0.5 - 0.5 * np.cos(t), 0.2 + 0.8 * np.sin(t)], 1)
    brow_r = np.stack([np.linspace(0.12, 0.42, 5), np.full(5, 0.12)], 1)
    brow_l = np.stack([np.linspace(0.58, 0.88, 5), np.full(5, 0.12)], 1)
    bridge = np.stack([np.full(4, 0.5), np.linspace(0.25, 0.55, 4)], 1)
    nostrils = np.stack([np.linspace(0.4, 0.6, 5), np.full(5, 0.62)], 1)

    def ring(cx: float, cy: float, rx: float, ry: float, n: int) -> np.ndarray:
        a = np.pi - np.arange(n) * 2 * np.pi / n  # from the left corner, over the top
        return np.stack([cx + rx * np.cos(a), cy - ry * np.sin(a)], 1)

    parts = [jaw, brow_r, brow_l, bridge, nostrils, ring(0.3, 0.3, 0.08, 0.03, 6), ring(0.7, 0.3, 0.08, 0.03, 6),
             ring(0.5, 0.8, 0.18, 0.07, 12), ring(0.5, 0.8, 0.12, 0.03, 8)]
    return np.concatenate(parts).astype(np.float32)


def build_fan(path: str | os.PathLike[str], seed: int = 0, stacks: int = 4) -> Path:
    """2dfan4.onnx stand-in: `input` [1,3,256,256] -> `landmarks` [1,68,3], `heatmaps` [1,68,64,64]."""
    g = _Graph(seed)
    x = g.conv("input", 3, 64, 7, 2, "relu")  # 128
    x = _conv_block(g, x, 64, 128)
    x = g.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])  # 64
    x = _conv_block(g, x, 128, 128)
    x = _conv_block(g, x, 128, 256)
    hm = ""
    for s in range(stacks):
        h = _hourglass(g, x, 4)
        h = _conv_block(g, h, 256, 256)
        h = g.conv(h, 256, 256, 1, 1, "relu")
        hm = g.conv(h, 256, 68, 1, 1, None)
        if s < stacks - 1:
            x = g.op("Add", [g.op("Add", [x, g.conv(h, 256, 256, 1, 1, None)]), g.conv(hm, 68, 256, 1, 1, None)])
    # Box units -> the 64 grid: the crop puts the box's longer side at 195 of 256 px, centred.
    grid = (mean_face_68() - 0.5) * (195.0 / 4.0) + 32.0
    table = np.concatenate([grid, np.full((68, 1), 0.9, np.float32)], 1)[None]
    link = g.zero_link(hm, [2, 3])  # [1,68,1,1]
    g.nodes.append(helper.make_node("Add", [g.const(table, "mean_face"),
                                            g.op("Reshape", [link, g.const(np.array([1, 68, 1], np.int64))])],
                                    ["landmarks"]))
    g.nodes.append(helper.make_node("Add", [g.op("Mul", [hm, g.const(np.array(0.0, np.float32), "zero")]),
                                            g.const(np.array(0.9, np.float32))], ["heatmaps"]))
    model = g.model("cost_2dfan4",
                    [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 256, 256])],
                    [helper.make_tensor_value_info("landmarks", TensorProto.FLOAT, [1, 68, 3]),
                     helper.make_tensor_value_info("heatmaps", TensorProto.FLOAT, [1, 68, 64, 64])])
    return _save(model, path)


BUILDERS: dict[str, Callable[..., Path]] = {
    "det_10g.onnx": build_scrfd,
    "w600k_r50.onnx": build_arcface,
    "inswapper_128.onnx": build_inswapper,
    "inswapper_128_fp16.onnx": build_inswapper_fp16,
    "2dfan4.onnx": build_fan,
    "simswap_256.onnx": build_simswap,
    "simswap_unofficial_512.onnx": build_simswap_512,
    "xseg_1.onnx": build_xseg,
    "bisenet_resnet_34.onnx": build_bisenet,
}


# -- counting ----------------------------------------------------------------------------------


def count_macs(model: onnx.ModelProto, input_shapes: dict[str, list[int]]) -> int:
    """Multiply-accumulates of every Conv, ConvTranspose, Gemm and MatMul in `model` at `input_shapes`.

    Shapes come from ONNX shape inference on a light copy: big initializers become graph
    inputs of the same shape (inference needs only their dims), small ones (reshape
    targets, scales) stay as values.
    """
    src = model.graph
    light = onnx.GraphProto()
    light.CopyFrom(helper.make_graph(list(src.node), "count", [], list(src.output)))
    for inp in src.input:
        dims = input_shapes.get(inp.name) or [d.dim_value for d in inp.type.tensor_type.shape.dim]
        light.input.append(helper.make_tensor_value_info(inp.name, inp.type.tensor_type.elem_type, dims))
    weight_dims: dict[str, list[int]] = {}
    for init in src.initializer:
        weight_dims[init.name] = list(init.dims)
        if int(np.prod(init.dims)) > 4096:
            light.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        else:
            light.initializer.append(init)
    inferred = shape_inference.infer_shapes(helper.make_model(light, opset_imports=list(model.opset_import)))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    shapes.update(weight_dims)
    total = 0
    for node in src.node:
        if node.op_type == "Conv":
            out, w = shapes[node.output[0]], shapes[node.input[1]]
            total += int(np.prod(out)) * int(np.prod(w[1:]))  # each output: cin/groups * kh * kw MACs
        elif node.op_type == "ConvTranspose":
            inp, w = shapes[node.input[0]], shapes[node.input[1]]
            total += int(np.prod(inp)) * int(np.prod(w[1:]))  # each input: cout/groups * kh * kw MACs
        elif node.op_type in ("Gemm", "MatMul"):
            a, out = shapes[node.input[0]], shapes[node.output[0]]
            k = a[-1] if not (node.op_type == "Gemm" and _attr(node, "transA")) else a[-2]
            total += int(np.prod(out)) * int(k)
    return total


def _attr(node: onnx.NodeProto, name: str) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), 0)


def build_all(outdir: str | os.PathLike[str], files: list[str] | None = None, seed: int = 0) -> dict[str, Path]:
    """Build the cost-equivalent models into `outdir` (all of them, or `files`)."""
    folder = Path(outdir)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = files or list(BUILDERS)
    unknown = [f for f in wanted if f not in BUILDERS]
    if unknown:
        raise ValueError(f"unknown model file(s) {unknown}; known: {', '.join(BUILDERS)}")
    return {f: BUILDERS[f](folder / f, seed=seed) for f in wanted}


def flop_table(paths: dict[str, Path]) -> list[tuple[str, float, float, float]]:
    """(file, estimated GMACs, built GMACs, built/estimate) per built file."""
    rows = []
    for f, p in paths.items():
        est = ESTIMATES[f]
        built = count_macs(onnx.load(str(p)), est.input_shapes) / 1e9
        rows.append((f, est.gmacs, built, built / est.gmacs))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--only", action="append", choices=list(BUILDERS), help="build just this file (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    paths = build_all(args.outdir, args.only, args.seed)
    print(f"{'file':<28} {'estimate GMACs':>15} {'built GMACs':>12} {'built/est':>10}  at / source")
    for f, est, built, ratio in flop_table(paths):
        e = ESTIMATES[f]
        dims = next(iter(e.input_shapes.values()))
        shape = "x".join(str(d) for d in (dims[1:3] if dims[-1] == 3 else dims[2:]))  # H x W, NHWC or NCHW
        print(f"{f:<28} {est:>11.1f} +-{e.tolerance:.0%} {built:>10.2f} {ratio:>10.2f}  {shape}; {e.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
