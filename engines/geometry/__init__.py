"""Face geometry every wing uses: alignment templates and similarity fits, warps of a
region of a frame, and measures read off landmarks. Imports only `engines.face`."""
