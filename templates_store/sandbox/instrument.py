"""Compile-time instrumentation: the template's tree rewritten so that loops, comparisons,
concatenation, literals and slices go through the budget."""

from __future__ import annotations

from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from templates_store.sandbox.operations import _COMPARE, _CONCAT, _CONTAINER, _ITERATE, _SLICE


def _static_chars(body: list[nodes.Node]) -> int:
    """Characters of template text in a loop body, excluding nested loop bodies (they are
    charged per iteration of their own loop)."""
    total = 0
    stack: list[nodes.Node] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, nodes.TemplateData):
            total += len(node.data)
        elif isinstance(node, nodes.For):
            stack.append(node.iter)
            stack.extend(node.else_)
        else:
            stack.extend(node.iter_child_nodes())
    return total


def _internal(name: str, value: nodes.Expr, args: list[nodes.Expr], lineno: int) -> nodes.Filter:
    return nodes.Filter(value, name, args, [], None, None, lineno=lineno)


class Instrument(NodeTransformer):
    """Route loops, comparisons, concatenation, literals and slices through the budget."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        static = nodes.Const(_static_chars(node.body), lineno=node.lineno)
        node.iter = _internal(_ITERATE, node.iter, [static], node.lineno)
        return node

    def visit_Compare(self, node: nodes.Compare) -> nodes.Node:
        self.generic_visit(node)
        args: list[nodes.Expr] = []
        for operand in node.ops:
            args.append(nodes.Const(operand.op, lineno=node.lineno))
            args.append(operand.expr)
        return _internal(_COMPARE, node.expr, args, node.lineno)

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _internal(_CONCAT, node.nodes[0], list(node.nodes[1:]), node.lineno)

    def _container(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        if getattr(node, "ctx", "load") != "load":
            return node
        return _internal(_CONTAINER, node, [], node.lineno)

    visit_List = visit_Tuple = visit_Dict = _container

    def visit_Getitem(self, node: nodes.Getitem) -> nodes.Node:
        self.generic_visit(node)
        if not isinstance(node.arg, nodes.Slice):
            return node
        part = node.arg
        args = [
            bound if bound is not None else nodes.Const(None, lineno=node.lineno)
            for bound in (part.start, part.stop, part.step)
        ]
        return _internal(_SLICE, node.node, args, node.lineno)
