"""INT8 model files: static QDQ quantisation of the standard ONNX models, checked against their
float originals within a drift budget per model family.

`budgets` says what each family may lose, `samples` finds calibration faces in pictures and
videos, `families` turns them into each model kind's inputs and measures drift on its
outputs, `quantizer` writes the QDQ file (ONNX Runtime's own tooling) and its report
(engines.int8), and `choose` which file a run loads for a precision, on which runtime.
"""
