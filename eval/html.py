"""A few helpers for the one-page HTML reports (no templates, no scripts, relative links)."""

from __future__ import annotations

import html

STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1500px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%}
pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap;word-break:break-all}
.videos{display:flex;flex-wrap:wrap;gap:1em}.videos figure{margin:0}.note{color:#a04000}
p.help{color:#555;max-width:70em}"""


def esc(x) -> str:
    return html.escape(str(x))


def fmt(x, digits: int = 3) -> str:
    """A number for a table: None as a dash, floats with `digits` decimals."""
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(fmt(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def section(title: str, *parts: str) -> str:
    return f"<h2>{esc(title)}</h2>" + "".join(parts)


def para(text: str, cls: str = "help") -> str:
    return f'<p class="{cls}">{esc(text)}</p>'


def unmeasured(why: str) -> str:
    """A figure that is not given, and why (instead of a number that means nothing)."""
    return para(f"Unmeasured: {why}.", "note")


def image(src: str, alt: str) -> str:
    return f'<img src="{esc(src)}" alt="{esc(alt)}">'


def video(src: str, caption: str) -> str:
    return (f'<figure><video src="{esc(src)}" controls loop muted preload="metadata"></video>'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def page(title: str, body: list[str]) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{esc(title)}</h1>{''.join(body)}</body></html>\n")
