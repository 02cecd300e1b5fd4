"""The HTTP edge: authenticate, validate, enqueue, serve reads."""
