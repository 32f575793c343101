"""Plugins (built-in and examples) use the kernel through its public attributes only (issue
33: no plugin touches a private attribute of the broker or its objects): an AST scan of
every plugin module for the private attributes the kernel's classes set on themselves,
reached through the names plugins hold the kernel's objects by (``broker``, ``partition``,
...)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def attributes(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            yield node


def is_own(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def kernel_private_names() -> set[str]:
    """The private attributes the kernel's objects hold (``self._x``) and its private methods."""
    names = set()
    for path in ROOT.joinpath("core").rglob("*.py"):
        names.update(node.attr for node in attributes(path) if is_own(node))
        tree = ast.parse(path.read_text(), str(path))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            names.update(
                f.name
                for f in cls.body
                if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name.startswith("_")
                if not f.name.startswith("__")
            )
    return names


#: The names plugins hold the kernel's objects by (hook arguments and the broker's attributes).
KERNEL_OBJECTS = {"broker", "partition", "topic", "ctx", "context", "connection", "replicas", "membership", "storage"}


def of_the_kernel(owner: ast.expr) -> bool:
    """Whether an attribute's owner is one of the kernel's objects, by the name it is held by."""
    name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else None
    return name in KERNEL_OBJECTS


def test_no_plugin_reaches_into_a_private_attribute_of_the_kernel():
    private = kernel_private_names()
    assert {"_server", "_stopped", "_save_catalog"} <= private  # the scan sees the Broker's
    modules = [*ROOT.joinpath("plugins").rglob("*.py"), *ROOT.joinpath("examples").rglob("*.py")]
    used = [
        f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}"
        for path in sorted(modules)
        for node in attributes(path)
        if node.attr in private and of_the_kernel(node.value)
    ]
    assert used == []
