"""facestream's inference engines: one class per model kind, behind small protocols."""
