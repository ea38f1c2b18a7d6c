"""The dashboard's view of a run of code: its results from what its record kept, and the
HTML it displayed, cleaned (tags of tables and text only, no script, style or attribute that
could act)."""

from typing import Any

import nh3
from django import template
from django.utils.safestring import SafeString, mark_safe

from sandboxes.models import Exec
from sandboxes.services.code.results import Result, outcome_of

register = template.Library()

# What a DataFrame's HTML and ordinary rich text need, and nothing that runs or loads.
_TAGS = {
    "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col",
    "div", "span", "p", "br", "b", "i", "strong", "em", "code", "pre", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6", "sub", "sup", "small", "hr",
}  # fmt: skip
_ATTRIBUTES = {"th": {"colspan", "rowspan"}, "td": {"colspan", "rowspan"}, "*": {"class"}}


@register.filter
def code_results(record: Exec) -> list[Result]:
    """A run's results as its record kept them (at most the pipeline's output limit: a result
    cut off there is not shown)."""
    if not record.language:
        return []
    return outcome_of(record.stdout).displayed_in_order


@register.filter
def clean_html(html: Any) -> SafeString:
    """HTML a sandbox displayed, with only the tags and attributes of tables and text."""
    cleaned = nh3.clean(str(html or ""), tags=_TAGS, attributes=_ATTRIBUTES, url_schemes=set())
    return mark_safe(cleaned)
