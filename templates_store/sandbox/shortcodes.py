"""The shortcodes a template reads from the substitution data, found in its syntax tree."""

from __future__ import annotations

from jinja2 import nodes

from templates_store.sandbox.checks import _is_name


def shortcodes(template: nodes.Template) -> set[str]:
    """Names the template reads from the substitution data: top-level names, and attribute
    paths as written (``user.first``). Names bound by the template itself (loop variables,
    ``set``, ``with``) are not data and are left out."""
    found: set[str] = set()
    _statements(template.body, set(), found)
    return found


def _targets(target: nodes.Node) -> set[str]:
    return {name.name for name in target.find_all(nodes.Name)} | (
        {target.name} if isinstance(target, nodes.Name) else set()
    )


def _statements(body: list[nodes.Node], declared: set[str], found: set[str]) -> None:
    for node in body:
        _statement(node, declared, found)


def _statement(node: nodes.Node, declared: set[str], found: set[str]) -> None:
    if isinstance(node, nodes.For):
        _expression(node.iter, declared, found)
        inner = declared | _targets(node.target) | {"loop"}
        if node.test is not None:
            _expression(node.test, inner, found)
        _statements(node.body, inner, found)
        _statements(node.else_, set(declared), found)
    elif isinstance(node, nodes.Assign):
        _expression(node.node, declared, found)
        declared |= _targets(node.target)
    elif isinstance(node, nodes.AssignBlock):
        if node.filter is not None:
            _expression(node.filter, declared, found)
        _statements(node.body, set(declared), found)
        declared |= _targets(node.target)
    elif isinstance(node, nodes.With):
        for value in node.values:
            _expression(value, declared, found)
        inner = set(declared)
        for target in node.targets:
            inner |= _targets(target)
        _statements(node.body, inner, found)
    elif isinstance(node, nodes.Expr):
        _expression(node, declared, found)
    else:
        # If, Output, FilterBlock, autoescape blocks: same scope (a set inside an if leaks out).
        for child in node.iter_child_nodes():
            _statement(child, declared, found)


def _expression(node: nodes.Node, declared: set[str], found: set[str]) -> None:
    if isinstance(node, nodes.Getattr):
        path = []
        current: nodes.Node = node
        while isinstance(current, nodes.Getattr):
            path.append(current.attr)
            current = current.node
        if isinstance(current, nodes.Name):
            if current.name not in declared:
                found.add(".".join([current.name, *reversed(path)]))
            return
        _expression(current, declared, found)
        return
    if isinstance(node, nodes.Name):
        if node.ctx == "load" and node.name not in declared:
            found.add(node.name)
        return
    if isinstance(node, nodes.Call) and _is_name(node.node, "range"):
        for child in node.iter_child_nodes():
            if child is not node.node:
                _expression(child, declared, found)
        return
    for child in node.iter_child_nodes():
        _expression(child, declared, found)
