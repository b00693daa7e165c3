"""Developer tools: the scripts (benchmarks, quality and GPU checks, lock and install checks)
and the support they share with the tests, imported as `tools.…`: the synthetic models
(tools/synth), the media makers (tools/media.py), the quality metrics and clip set
(tools/quality), the A/V sync readers (tools/av_sync.py, tools/webrtc_sync.py).

A script runs as a file (`python tools/bench.py`) or as a module from the repository root
(`python -m tools.bench`). Run as a file, it first puts the tree it sits in on sys.path, with
the one idiom tests/test_layers.py checks: a tool measures the tree it sits in, even when the
venv's editable install points at another tree (../shared/tools/speed_ab.py runs an older
commit's tools/bench.py from a worktree). The tests find this package through pytest's
`pythonpath` setting (pyproject.toml)."""
