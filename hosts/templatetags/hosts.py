from django import template
from django.utils.formats import number_format

from hosts.forms import LABELS

register = template.Library()


@register.filter
def host_fields(names: object) -> str:
    """The fields of a host an event says changed ("url", "labels"), as the form names them."""
    if not isinstance(names, list | tuple):
        return ""
    return ", ".join(str(LABELS.get(str(name), name)) for name in names)


@register.filter
def amount(value: object) -> str:
    """A number of CPUs or MiB as the admin's language writes it, with no more than two
    decimals and none when it is whole (3.5, 0.25, 8)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return ""
    number: float = round(float(value), 2)
    return number_format(int(number) if number.is_integer() else number)
