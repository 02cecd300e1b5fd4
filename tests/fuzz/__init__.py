"""Fuzz tests: bad input at scale against the API, the OTLP decoder, case files and ATIF."""
