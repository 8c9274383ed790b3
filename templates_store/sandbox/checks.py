"""Compile-time checks: the constructs a template may not use, refused with their line."""

from __future__ import annotations

from jinja2 import nodes

from templates_store.sandbox.environment import LOOP_METHODS, LOOP_VALUE_ATTRIBUTES
from templates_store.sandbox.filters import _PUBLIC_TESTS, PUBLIC_FILTER_NAMES

_REFUSED_TAGS: dict[type[nodes.Node], str] = {
    nodes.Extends: "extends",
    nodes.Include: "include",
    nodes.Import: "import",
    nodes.FromImport: "from … import",
    nodes.Macro: "macro",
    nodes.CallBlock: "call",
    nodes.Block: "block",
}


class Refused(Exception):
    """A construct the shortcode language does not allow; ``lineno`` locates it."""

    def __init__(self, lineno: int | None, message: str) -> None:
        super().__init__(message)
        self.lineno = lineno
        self.message = message


def _is_name(node: nodes.Node, name: str) -> bool:
    return isinstance(node, nodes.Name) and node.name == name


def check(node: nodes.Node, in_loop: bool = False) -> None:
    """Refuse what the sandbox does not support; raises :class:`Refused`.

    Inside a loop body ``loop`` may only be read through its attributes, so the loop object
    itself (whose ``str`` is a Python repr) never becomes a value.
    """
    tag = _REFUSED_TAGS.get(type(node))
    if tag is not None:
        raise Refused(node.lineno, f"the '{tag}' tag is not supported")
    if isinstance(node, nodes.Filter) and node.name not in PUBLIC_FILTER_NAMES:
        raise Refused(node.lineno, f"no filter named {node.name!r}")
    if isinstance(node, nodes.Test) and node.name not in _PUBLIC_TESTS:
        raise Refused(node.lineno, f"no test named {node.name!r}")
    if isinstance(node, nodes.NSRef):
        raise Refused(node.lineno, "assigning to an attribute is not supported")
    if isinstance(node, nodes.For):
        if node.recursive:
            raise Refused(node.lineno, "recursive loops are not supported")
        check(node.iter, in_loop)
        if node.test is not None:
            check(node.test, True)
        for child in node.body:
            check(child, True)
        for child in node.else_:
            check(child, in_loop)
        return
    if isinstance(node, nodes.Name):
        if node.name == "self":
            raise Refused(node.lineno, "'self' is a reserved name")
        if in_loop and node.name == "loop":
            raise Refused(
                node.lineno,
                "'loop' can only be used through its attributes, e.g. loop.index",
            )
        return
    if isinstance(node, nodes.Getattr) and in_loop and _is_name(node.node, "loop"):
        if node.attr not in LOOP_VALUE_ATTRIBUTES:
            raise Refused(node.lineno, f"'loop.{node.attr}' is not supported")
        return
    if isinstance(node, nodes.Call):
        callee = node.node
        is_loop_method = (
            in_loop
            and isinstance(callee, nodes.Getattr)
            and _is_name(callee.node, "loop")
            and callee.attr in LOOP_METHODS
        )
        if not (is_loop_method or _is_name(callee, "range")):
            raise Refused(
                node.lineno, "only range(), loop.cycle() and loop.changed() can be called"
            )
        for arg in (*node.args, *node.kwargs, node.dyn_args, node.dyn_kwargs):
            if arg is not None:
                check(arg, in_loop)
        return
    for child in node.iter_child_nodes():
        check(child, in_loop)
