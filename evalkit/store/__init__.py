"""The only layer that picks SQL statements and maps rows to wire objects."""
