"""Storage: tables, the repository (all SQL), the vector index and the embedders."""
