"""Griffe extension for the API reference (``mkdocs.yml``): Sphinx roles as code spans.

The docstrings use Sphinx cross-reference roles (``:class:`~queue_core.records.errors.NotFound```,
``:meth:`reap```), which Markdown would print verbatim. This rewrites each role to a
code span of its target, shortened the way ``~`` asks (``NotFound``), before
mkdocstrings renders the docstring.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")


def strip_roles(text: str) -> str:
    """``:class:`~a.b.C``` -> ```C```; ``:mod:`a.b``` -> ```a.b```."""

    def code(m: re.Match[str]) -> str:
        target = m.group(2).strip()
        if m.group(1):
            target = target.rsplit(".", 1)[-1]
        return f"`{target}`"

    return ROLE.sub(code, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the roles in every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = strip_roles(obj.docstring.value)
