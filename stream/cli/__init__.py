"""The `facestream` command line (entry point: `stream.cli.main:main`)."""
