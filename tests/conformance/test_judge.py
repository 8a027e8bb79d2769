"""The conformance verdict's own rules (tests/conformance/harness.py), on hand-made results: no oracle
runs here."""

from __future__ import annotations

from tests.conformance import harness

PAGE_TYPE_ERROR = "Variable '$page' has invalid value: Int cannot represent non-integer value: 1.5"
EMPTY = {"ok": True, "ids": [], "total": 0, "perPage": 0, "hasMore": False, "messages": []}


def _verdict(oracle: list[dict], candidate: list[dict]) -> harness.Verdict:
    dataset = {"queries": [{"name": r["name"], "args": {}} for r in oracle], "messages": []}
    return harness.judge(
        {"results": oracle}, {"results": candidate}, dataset, semantic_pending=False, label="unit"
    )


def _type_error(name: str, text: str = PAGE_TYPE_ERROR) -> dict:
    return {"name": name, "ok": False, "error": text, "code": "BAD_USER_INPUT"}


def test_an_answer_echoing_a_page_graphql_cannot_type_is_set_aside_not_passed() -> None:
    """lastMessages false returns the empty result before page is checked, echoing page 1.5; GraphQL
    refuses the variable first. Only that pair is set aside: any other difference still fails."""
    verdict = _verdict(
        [
            {"name": "echoed", "page": 1.5, **EMPTY},
            {"name": "integer page", "page": 2, **EMPTY},
            {"name": "other variable", "page": 1.5, **EMPTY},
            {"name": "answered", "page": 1.5, **EMPTY},
        ],
        [
            _type_error("echoed"),
            _type_error("integer page"),
            _type_error("other variable", "Variable '$perPage' got invalid value 1.5"),
            {"name": "answered", "page": 0, **EMPTY},
        ],
    )
    assert verdict.untypable == ["echoed"]
    assert verdict.passed == []
    assert [name for name, _ in verdict.failed] == ["integer page", "other variable", "answered"]
    assert not verdict.ok
    assert verdict.summary().endswith("UNTYPABLE 1")
