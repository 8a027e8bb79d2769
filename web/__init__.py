"""The web layer: settings, the Starlette app factory, the CLI and the front end."""
