"""HTML pages from Jinja2 templates: autoescaped, self-contained (inline CSS, figures as data
URIs, no JavaScript, nothing fetched), shared by the experiment page and the compare page.

Example:
    >>> render("base.html.j2", title="a <b> page").count("&lt;b&gt;")
    1
    >>> str(pretty_json({"a": [1, 2]}))
    '{\\n  "a": [\\n    1,\\n    2\\n  ]\\n}'

Each template in `templates/` extends `base.html.j2`; `pretty_json` keeps newlines and escapes other
control characters, so no recorded string can rewrite the page.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from gptlineage.core.errors import escaped

# Characters a page must not carry raw (controls, format characters, unassigned code points),
# newline and tab excepted.
HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
KEPT = {"\n", "\t"}


def visible(text: Any) -> str:
    """TEXT with control and invisible characters written as escapes, newlines and tabs kept."""
    return escaped(str(text), HIDDEN, KEPT)


def pretty_json(value: Any) -> str:
    """VALUE as indented JSON text (non-ASCII kept, other controls escaped by json itself)."""
    return visible(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))


def svg_data_uri(svg: bytes | str) -> str:
    """A figure as a data URI for <img src>: its ids and styles stay inside the image."""
    data = svg.encode("utf-8") if isinstance(svg, str) else svg
    return "data:image/svg+xml;base64," + base64.b64encode(data).decode("ascii")


def trusted_svg(svg: str) -> Markup:
    """An inline SVG the project drew itself (the lineage graph): inserted as markup, not text."""
    return Markup(svg)


ENVIRONMENT = Environment(
    loader=PackageLoader("gptlineage.reporting", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,  # a misspelt variable fails the render instead of printing nothing
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
ENVIRONMENT.filters.update(
    {"pretty_json": pretty_json, "data_uri": svg_data_uri, "visible": visible, "thousands": "{:,}".format}
)


def render(template: str, **values: Any) -> str:
    """The page TEMPLATE renders with VALUES (escaped unless marked as markup)."""
    return ENVIRONMENT.get_template(template).render(**values)
