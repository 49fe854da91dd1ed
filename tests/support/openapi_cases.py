"""Requests schemathesis generates from the published OpenAPI document (``openapi_document``), both
ways (bodies the schema calls valid, and invalid ones), and the checks every answer must pass. Shared
by the fuzz test (tests/proxy/http/test_openapi.py) and the long fuzz run (tests/bench/fuzz.py)."""

from __future__ import annotations

import schemathesis
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from proxy.http.openapi_document import openapi_document

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]
DOCUMENT = openapi_document()
OPERATIONS = [result.ok() for result in schemathesis.openapi.from_dict(DOCUMENT).get_all_operations()]


def _served_model(case: schemathesis.Case) -> schemathesis.Case:
    """Valid bodies name the model the fake engine serves, so they reach it (any other name is its 404)."""
    if isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = "fake-model"
    return case


CASES = st.one_of(
    *(operation.as_strategy(generation_mode=GenerationMode.POSITIVE).map(_served_model) for operation in OPERATIONS),
    *(operation.as_strategy(generation_mode=GenerationMode.NEGATIVE) for operation in OPERATIONS),
)
