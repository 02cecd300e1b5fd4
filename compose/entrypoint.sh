#!/bin/sh
# The image's entry point: every argument list is an evalkit command, with or without the
# word evalkit in front, so both of these run `evalkit db status`:
#   docker compose run --rm server evalkit db status
#   docker compose run --rm server db status
# With no command the image's CMD runs (`server --host 0.0.0.0`). For a shell:
#   docker compose run --rm --entrypoint sh server
set -eu
if [ "${1:-}" = evalkit ]; then
  shift
fi
exec evalkit "$@"
