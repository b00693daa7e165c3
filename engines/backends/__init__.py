"""Inference backends: what runs an ONNX model file (the `--runtime` choices).

`base` is the protocol every backend implements and the options that configure one;
`registry` makes one for a model file by name; `ort` (ONNX Runtime), `trt/` (native
TensorRT), `triton/` (a Triton server over gRPC) and `openvino` (Intel's OpenVINO: CPU,
Intel GPU, NPU) are the backends. A backend imports
only the engines' root vocabulary and its own wing.
"""
