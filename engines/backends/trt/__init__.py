"""Native TensorRT: the runtime, the engine build from ONNX, the on-disk engine cache, and
the check of what the machine has (GPU, tensorrt, cupy)."""
