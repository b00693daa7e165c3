"""facestream's pipeline runtime: frames, rings, stages, sources, sinks, tracklets, CLI."""
