"""Triton Inference Server: the gRPC runtime, the servers it spreads over, the factory that
picks a model's server, and the model repository `facestream triton-repo` writes."""
