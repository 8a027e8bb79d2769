"""The Strawberry schema: types, inputs, scalars and root types. The only package importing strawberry."""

from schema.build import build_schema, export_sdl

__all__ = ["build_schema", "export_sdl"]
