"""The uvicorn internals api/uvicorn_private.py calls still exist, with the signatures it was
written against: an upgrade of uvicorn that removes or changes one fails here, naming it, rather
than at the first request a server answers."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from timeline_fanout.api import bounded_http, uvicorn_private
from timeline_fanout.api.uvicorn_private import PRIVATE_METHODS


@pytest.mark.parametrize("name", sorted(PRIVATE_METHODS))
def test_each_private_uvicorn_method_the_adapter_calls_keeps_its_signature(name: str) -> None:
    method = getattr(HttpToolsProtocol, name, None)
    assert callable(method), (
        f"uvicorn {uvicorn.__version__} has no HttpToolsProtocol.{name}: "
        "api/uvicorn_private.py calls it; adapt the adapter or keep the pin below this version"
    )
    signature = inspect.signature(method, eval_str=True)
    parameters, returns = PRIVATE_METHODS[name]
    assert (tuple(signature.parameters), signature.return_annotation) == (parameters, returns), (
        f"uvicorn {uvicorn.__version__} changed HttpToolsProtocol.{name} to {signature}: "
        "api/uvicorn_private.py calls it as declared in PRIVATE_METHODS"
    )


def private_members_called(module_source: str) -> set[str]:
    return {
        node.attr
        for node in ast.walk(ast.parse(module_source))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr.startswith("_")
    }


def test_the_adapter_declares_every_private_member_it_calls() -> None:
    source = Path(inspect.getfile(uvicorn_private)).read_text()
    assert private_members_called(source) == set(PRIVATE_METHODS)


def test_the_bounded_protocol_calls_no_private_uvicorn_method_but_through_the_adapter() -> None:
    uvicorns_private = {name for name in vars(HttpToolsProtocol) if name.startswith("_")}
    source = Path(inspect.getfile(bounded_http)).read_text()
    assert private_members_called(source) & uvicorns_private == set()
