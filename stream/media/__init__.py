"""Media helpers, each defined once: frame conversion, the 90 kHz clock, backoff, quiet
close, still images, video descriptions, and the demo clips."""
