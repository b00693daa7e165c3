"""The swap-quality instrument: a clip set with ground truth, metrics, and the suite (tools/eval_quality.py)."""
