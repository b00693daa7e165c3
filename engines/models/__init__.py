"""The neural models: each class wraps one published ONNX file (its I/O, crop template and
normalisation) and runs it through a backend it is given, never one it builds. `adapters`
turns them into the detector and swapper the pipeline's protocols ask for; `paste` holds
the paste-back helpers the swapper and the enhancer share."""
