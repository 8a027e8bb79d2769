"""`python -m schema` rewrites schema/schema.graphql from the code."""

from schema.build import SDL_PATH, export_sdl

SDL_PATH.write_text(export_sdl())
print(f"wrote {SDL_PATH}")  # noqa: T201
