"""The GPU check (tools/gpu_check/run.py) and the modules it runs."""
