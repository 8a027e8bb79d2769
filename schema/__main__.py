"""`python -m schema` rewrites schema/schema.graphql (the public SDL) and schema/subgraph.graphql (the
federation subgraph SDL, what `_service { sdl }` answers) from the code."""

from schema.build import SDL_PATH, SUBGRAPH_SDL_PATH, export_sdl, export_subgraph_sdl

SDL_PATH.write_text(export_sdl())
print(f"wrote {SDL_PATH}")  # noqa: T201
SUBGRAPH_SDL_PATH.write_text(export_subgraph_sdl())
print(f"wrote {SUBGRAPH_SDL_PATH}")  # noqa: T201
