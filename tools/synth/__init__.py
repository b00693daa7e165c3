"""Small seeded ONNX stand-ins with the real I/O of the standard face models (tests, benchmarks)."""
