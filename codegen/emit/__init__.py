"""Emit: Program -> firmware source tree (path -> text), via Jinja2 templates."""
from .render import EmittedTree, emit_tree

__all__ = ["EmittedTree", "emit_tree"]
