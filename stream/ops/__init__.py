"""Running facestream as a service: Prometheus metrics, health and readiness, drain on SIGTERM."""
