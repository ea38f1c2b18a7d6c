"""The fleet page's charts as inline SVG, drawn on the server from the minute samples: no
chart library, no script. Each chart is a list of points over the last day."""

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from itertools import pairwise

from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from sandboxes.models import FleetSample

WIDTH, HEIGHT, PAD = 560, 120, 24
WINDOW = timedelta(hours=24)
COLOURS = {
    "live": "#2f6fed",
    "created": "#1e8e3e",
    "reused": "#8e44ad",
    "idle": "#b7791f",
    "ttl": "#c0392b",
    "closed": "#5b6575",
    "admin": "#16a085",
    "error": "#e74c3c",
    "lost": "#7f8c8d",
    "quota": "#d35400",
}


def fleet_charts(pipeline: str = "") -> dict[str, SafeString]:
    """Live sandboxes over time; creates and reuses per minute; stops by reason per minute."""
    since = timezone.now() - WINDOW
    samples = list(FleetSample.objects.filter(pipeline=pipeline, at__gte=since).order_by("at"))
    times = [sample.at for sample in samples]
    live = [sum(sample.live.values()) for sample in samples]
    created = _deltas([sample.created for sample in samples])
    reused = _deltas([sample.reused for sample in samples])
    reasons = sorted({reason for sample in samples for reason in sample.cleaned})
    stops = {
        reason: _deltas([sample.cleaned.get(reason, 0) for sample in samples]) for reason in reasons
    }
    return {
        "live": _chart(_("Live sandboxes"), times, {"live": live}),
        "activity": _chart(
            _("Created and reused, per sample"), times[1:], {"created": created, "reused": reused}
        ),
        "stops": _chart(_("Stopped, by reason, per sample"), times[1:], stops),
    }


def _deltas(totals: Sequence[float]) -> list[float]:
    """What a running total grew by between samples (a restart that reset it counts as 0)."""
    return [max(later - earlier, 0) for earlier, later in pairwise(totals)]


def _chart(
    title: str, times: Sequence[datetime], series: Mapping[str, Sequence[float]]
) -> SafeString:
    top = max([1.0, *(value for values in series.values() for value in values)])
    label = escape(title)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}">',
        f"<title>{label}</title>",
        f'<text x="{PAD}" y="12" class="chart-title">{label}</text>',
        f'<text x="{WIDTH - 2}" y="{PAD}" text-anchor="end" class="chart-axis">{top:g}</text>',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" class="chart-base"/>',
    ]
    if len(times) < 2:
        waiting = escape(_("Not enough samples yet (one a minute)."))
        parts.append(
            f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="chart-axis">'
            f"{waiting}</text>"
        )
    else:
        start, span = times[0], max((times[-1] - times[0]).total_seconds(), 1)
        for name, values in series.items():
            points = " ".join(
                f"{PAD + (moment - start).total_seconds() / span * (WIDTH - 2 * PAD):.1f},"
                f"{HEIGHT - PAD - value / top * (HEIGHT - 2 * PAD - 8):.1f}"
                for moment, value in zip(times, values, strict=False)
            )
            colour = COLOURS.get(name, "#333")
            parts.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>'
            )
        legend_x = PAD
        for name in series:
            colour = COLOURS.get(name, "#333")
            parts.append(
                f'<text x="{legend_x}" y="{HEIGHT - 6}" fill="{colour}" class="chart-legend">{escape(name)}</text>'
            )
            legend_x += 8 * len(name) + 16
        parts.append(
            f'<text x="{WIDTH - PAD}" y="{HEIGHT - 6}" text-anchor="end" class="chart-axis">'
            f"{times[0]:%H:%M}–{times[-1]:%H:%M} UTC</text>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))
