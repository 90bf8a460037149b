"""The smallest HTML toolkit a self-contained report needs: escaped text, tables, embedded PNGs.

Everything lands in one file: images are ``data:image/png;base64`` URIs and the
style sheet is inline, so the report can be mailed or attached to a ticket.

>>> table([{"model": "dkt", "log_loss": 0.81234}], ["model", "log_loss"])
'<div class="table"><table><thead><tr><th>model</th><th>log loss</th></tr></thead><tbody><tr><td>dkt</td><td class="num">0.8123</td></tr></tbody></table></div>'
>>> escape("<b>")
'&lt;b&gt;'
"""

from __future__ import annotations

import base64
import html
import math
from typing import Any, Sequence

STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto; max-width: 1100px;
       color: #1d2329; line-height: 1.45; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 0.2em; }
.table { max-width: 100%; overflow-x: auto; margin: 0.6em 0 1.2em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #d0d7de; padding: 0.25em 0.5em; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
td { min-width: 3em; } th { background: #f3f5f7; overflow-wrap: normal; hyphens: auto; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; min-width: 0; }
figure { margin: 1em 0 1.6em; } figure img { max-width: 100%; border: 1px solid #eaeef2; }
figcaption { font-size: 0.9em; color: #4b5561; max-width: 900px; }
.pass { color: #1a7f37; font-weight: 600; } .fail { color: #cf222e; font-weight: 600; }
.na { color: #6e7781; } .note { background: #fff8c5; border: 1px solid #e9d99a; padding: 0.5em 0.8em; }
.meta { color: #57606a; font-size: 0.9em; }
"""


def escape(text: Any) -> str:
    return html.escape(str(text), quote=True)


def cell(value: Any) -> str:
    """A table cell: numbers right-aligned, 4 decimals for floats, '-' for missing and NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return '<td class="num">-</td>'
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, float):  # tolerances such as 1e-06 must not print as 0.0000
        text = f"{value:.2e}" if value != 0 and not 1e-3 <= abs(value) < 1e5 else f"{value:.4f}"
        return f'<td class="num">{text}</td>'
    if isinstance(value, int):
        return f'<td class="num">{value:,}</td>'
    if isinstance(value, Raw):
        return f"<td>{value}</td>"
    return f"<td>{escape(value)}</td>"


class Raw(str):
    """Already-safe HTML for a table cell (e.g. a coloured status)."""


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None) -> str:
    """A table in a box as wide as the page: text cells wrap (long labels, ids, details), headers read
    ``log_loss`` as "log loss", so the table fits the page instead of widening it."""
    head = "".join(f"<th>{escape(h)}</th>" for h in (headers or [c.replace("_", " ") for c in columns]))
    body = "".join("<tr>" + "".join(cell(r.get(c)) for c in columns) + "</tr>" for r in rows)
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def figure(png: bytes, alt: str, caption: str) -> str:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "figure() embeds PNG bytes only"
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{escape(alt)}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def section(title: str, *parts: str, anchor: str | None = None) -> str:
    ident = f' id="{escape(anchor)}"' if anchor else ""
    return f"<section><h2{ident}>{escape(title)}</h2>{''.join(parts)}</section>"


def paragraph(text: str, cls: str | None = None) -> str:
    return f'<p class="{cls}">{escape(text)}</p>' if cls else f"<p>{escape(text)}</p>"


def page(title: str, subtitle: str, sections: Sequence[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1><p class=\"meta\">{escape(subtitle)}</p>"
            + "".join(sections) + "</body></html>\n")
