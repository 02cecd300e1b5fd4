"""OpenTelemetry: the OTLP collector, stored spans, sessions, span mappings and the
trajectories built from them."""
