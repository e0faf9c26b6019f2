"""A small inline SVG line chart of one queue's depth (pure: data in, markup out).

Only numbers and fixed strings go into the markup, so it is safe to embed unescaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from .history import WINDOW


def sparkline(
    points: Sequence[tuple[float, int]],
    *,
    now: float,
    window: float = WINDOW,
    width: int = 240,
    height: int = 48,
    label: str = "DLQ depth, last hour",
) -> str:
    """An ``<svg>`` of ``(time, depth)`` over the ``window`` seconds before ``now``:
    a stepped line with the maximum written at the top left."""
    pad = 2
    shown = [(t, d) for t, d in points if now - window <= t <= now]
    top = max((d for _, d in shown), default=0)
    scale_y = (height - 2 * pad - 12) / top if top else 0.0

    def x(t: float) -> float:
        return pad + (width - 2 * pad) * (t - (now - window)) / window

    def y(d: int) -> float:
        return height - pad - d * scale_y

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="spark" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f"<title>{html.escape(label)}</title>",
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        'class="axis"/>',
    ]
    if shown:
        path: list[str] = []
        previous: float | None = None
        for t, d in shown:
            if previous is None:
                path.append(f"M{x(t):.1f},{y(d):.1f}")
            else:
                path.append(f"H{x(t):.1f}V{y(d):.1f}")
            previous = y(d)
        path.append(f"H{x(now):.1f}")
        parts.append(f'<path d="{"".join(path)}" class="line" fill="none"/>')
        parts.append(f'<text x="{pad + 2}" y="11" class="max">max {top}</text>')
    else:
        parts.append(f'<text x="{pad + 2}" y="{height // 2}" class="max">no samples yet</text>')
    parts.append("</svg>")
    return "".join(parts)
