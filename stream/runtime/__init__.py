"""The pipeline runtime: rings of preallocated slots, the runner that joins stages with them,
allocators (numpy or pinned), metrics. It knows nothing of faces or media formats."""
