"""Schema assembly: limits, error codes and masking."""

from __future__ import annotations

import logging
from pathlib import Path

import strawberry
from graphql import GraphQLError
from strawberry.extensions import MaskErrors, MaxAliasesLimiter, MaxTokensLimiter, QueryDepthLimiter, SchemaExtension

from resolvers.errors import RecallQLError
from schema.root import Mutation, Query

SDL_PATH = Path(__file__).with_name("schema.graphql")
log = logging.getLogger("recallql.errors")


def _is_expected(error: GraphQLError) -> bool:
    return error.original_error is None or isinstance(error.original_error, RecallQLError)


class ErrorCodes(SchemaExtension):
    """Gives every error an extensions.code: ours carry one; GraphQL's own get the standard ones."""

    def on_operation(self):  # type: ignore[no-untyped-def]
        yield
        result = self.execution_context.result
        if result is None or not result.errors:
            return
        request_id = getattr(self.execution_context.context, "request_id", None)
        for error in result.errors:
            extensions = dict(error.extensions or {})
            if "code" not in extensions:
                if error.original_error is not None and not isinstance(error.original_error, RecallQLError):
                    log.error("internal error (request %s)", request_id, exc_info=error.original_error)
                    extensions["code"] = "INTERNAL_SERVER_ERROR"
                elif "Syntax Error" in error.message:
                    extensions["code"] = "GRAPHQL_PARSE_FAILED"
                elif error.message.startswith("Variable '$") or "got invalid value" in error.message:
                    extensions["code"] = "BAD_USER_INPUT"
                else:
                    extensions["code"] = "GRAPHQL_VALIDATION_FAILED"
            if request_id:
                extensions.setdefault("requestId", request_id)
            error.extensions = extensions


def build_schema(
    *, max_depth: int = 12, max_tokens: int = 5000, max_aliases: int = 30, mask_errors: bool = True
) -> strawberry.Schema:
    extensions: list[object] = [
        QueryDepthLimiter(max_depth=max_depth),
        MaxTokensLimiter(max_token_count=max_tokens),
        MaxAliasesLimiter(max_alias_count=max_aliases),
    ]
    if mask_errors:
        extensions.append(MaskErrors(should_mask_error=lambda e: not _is_expected(e)))
    extensions.append(ErrorCodes)
    return strawberry.Schema(query=Query, mutation=Mutation, extensions=extensions)  # type: ignore[arg-type]


def export_sdl() -> str:
    return build_schema().as_str() + "\n"
