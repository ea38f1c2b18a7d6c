"""The fleet page's charts as inline SVG, drawn on the server from the minute samples: no
chart library, no script. Each chart is a list of points over the last day, with its scale
and unit on the left, its time span below, its series named in the page's language, and the
value of a moment shown on hover (a point's own title, as the browser shows a tooltip)."""

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from itertools import pairwise

from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from sandboxes.models import FleetSample, StopReason

WIDTH, HEIGHT, PAD = 560, 120, 24
WINDOW = timedelta(hours=24)
# Each series' colour, dark enough for its name to be read on the chart's panel (4.5:1).
COLOURS = {
    "live": "#2860d8",
    "created": "#187a35",
    "reused": "#7d3c98",
    "idle": "#93600f",
    "ttl": "#c0392b",
    "closed": "#5b6575",
    "admin": "#117a65",
    "error": "#b03a2e",
    "lost": "#5d6d7e",
    "quota": "#a04000",
}
# At most this many points of a series carry their value for hover.
HOVER_POINTS = 48


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
    names = {"live": _("live"), "created": _("created"), "reused": _("reused")}
    names.update({reason: _reason(reason) for reason in reasons})
    return {
        "live": _chart(_("Live sandboxes"), _("sandboxes"), times, {"live": live}, names),
        "activity": _chart(
            _("Created and reused, per sample"),
            _("a minute"),
            times[1:],
            {"created": created, "reused": reused},
            names,
        ),
        "stops": _chart(
            _("Stopped, by reason, per sample"), _("a minute"), times[1:], stops, names
        ),
    }


def _reason(reason: str) -> str:
    try:
        return str(StopReason(reason).label)
    except ValueError:
        return reason


def _deltas(totals: Sequence[float]) -> list[float]:
    """What a running total grew by between samples (a restart that reset it counts as 0)."""
    return [max(later - earlier, 0) for earlier, later in pairwise(totals)]


def _chart(
    title: str,
    unit: str,
    times: Sequence[datetime],
    series: Mapping[str, Sequence[float]],
    names: Mapping[str, str],
) -> SafeString:
    top = max([1.0, *(value for values in series.values() for value in values)])
    label = escape(title)
    base = HEIGHT - PAD
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}">',
        f"<title>{label}</title>",
        f'<text x="{PAD}" y="12" class="chart-title">{label}</text>',
        # The scale: its top and its foot, and what it counts.
        f'<text x="{PAD - 4}" y="{PAD + 4}" text-anchor="end" class="chart-axis">{top:g}</text>',
        f'<text x="{PAD - 4}" y="{base}" text-anchor="end" class="chart-axis">0</text>',
        f'<text x="{WIDTH - PAD}" y="12" text-anchor="end" class="chart-axis">{escape(unit)}</text>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{base}" class="chart-base"/>',
        f'<line x1="{PAD}" y1="{base}" x2="{WIDTH - PAD}" y2="{base}" class="chart-base"/>',
    ]
    if len(times) < 2:
        waiting = escape(_("Not enough samples yet (one a minute)."))
        parts.append(
            f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="chart-axis">'
            f"{waiting}</text>"
        )
    else:
        start, span = times[0], max((times[-1] - times[0]).total_seconds(), 1)

        def at(moment: datetime, value: float) -> tuple[float, float]:
            x = PAD + (moment - start).total_seconds() / span * (WIDTH - 2 * PAD)
            return x, base - value / top * (HEIGHT - 2 * PAD - 8)

        step = max(1, len(times) // HOVER_POINTS)
        for name, values in series.items():
            colour = COLOURS.get(name, "#333")
            points = " ".join(
                "{:.1f},{:.1f}".format(*at(moment, value))
                for moment, value in zip(times, values, strict=False)
            )
            parts.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>'
            )
            for moment, value in list(zip(times, values, strict=False))[::step]:
                x, y = at(moment, value)
                said = escape(f"{moment:%H:%M} UTC · {names.get(name, name)}: {value:g}")
                parts.append(
                    f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}" class="chart-point">'
                    f"<title>{said}</title></circle>"
                )
        legend_x = PAD
        for name in series:
            colour = COLOURS.get(name, "#333")
            shown = names.get(name, name)
            parts.append(
                f'<text x="{legend_x}" y="{HEIGHT - 6}" fill="{colour}" class="chart-legend">'
                f"{escape(shown)}</text>"
            )
            legend_x += 8 * len(shown) + 16
        parts.append(
            f'<text x="{WIDTH - PAD}" y="{HEIGHT - 6}" text-anchor="end" class="chart-axis">'
            f"{times[0]:%H:%M}–{times[-1]:%H:%M} UTC</text>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))
