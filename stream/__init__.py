"""facestream's pipeline, in layers (lowest first): runtime, media, sources and sinks,
analysis, stages, job, server, cli; `errors` and `config` under all of them."""
