"""One run assembled: the swap job (models, source faces), the pipeline, the runs, the report."""
