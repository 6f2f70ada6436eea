"""A class's results on one page: which task the class got right, which idea it missed, and who needs a look
(``capsule-lab gradebook --html``; every chapter's exercises).

:func:`write_class_summary` writes a self-contained HTML page (no script, no external file) from the gradebook's
inputs (:mod:`.gradebook`): per chapter, each checked task with how many of the graded notebooks earned its full
points, the mean points, and the most common hints the students who missed it were given (the hint of the known
mistake their answer matched, or the task's general one) — the wrong idea a class shares shows up as one hint
given many times; each hand-scored item with how many are scored and their mean; then one row per student with
each chapter's total or why there is none, and the flags. Tables have captions and column headers, for a screen
reader as for the eye.
"""

from __future__ import annotations

import html
import os
from collections import Counter
from pathlib import Path
from typing import Sequence

from ..tasks import TASKS
from ..tasks.questions import QUESTIONS
from .atomic import write_atomic
from .gradebook import chapter_maxima, gradebook_rows, items

__all__ = ["write_class_summary", "COMMON_HINTS"]

#: How many of the most common hints each task's row lists.
COMMON_HINTS = 3

_STYLE = """body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;color:#1a1a1a}
table{border-collapse:collapse;margin:0 0 2rem;width:100%}caption{text-align:left;font-weight:600;padding:.4rem 0}
th,td{border:1px solid #999;padding:.3rem .5rem;text-align:left;vertical-align:top}th{background:#eee}
td.n{text-align:right}ol{margin:0;padding-left:1.2rem}.wide{overflow-x:auto;margin:0 0 2rem}
.wide table{margin:0}"""


def _cell(value, numeric: bool = False) -> str:
    return f'<td{" class=n" if numeric else ""}>{html.escape(str(value))}</td>'


def _table(caption: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in columns)
    body = "".join(f"<tr>{''.join(r)}</tr>" for r in rows)
    table = (f"<table><caption>{html.escape(caption)}</caption><thead><tr>{head}</tr></thead>"
             f"<tbody>{body}</tbody></table>")
    # a narrow screen scrolls the table, not the page; the region takes the keyboard's focus to scroll
    return f'<div class="wide" role="region" tabindex="0" aria-label="{html.escape(caption)}">{table}</div>'


def _hints(counter: Counter) -> str:
    if not counter:
        return "<td>–</td>"
    listed = "".join(f"<li>{html.escape(h)} <strong>({n}×)</strong></li>"
                     for h, n in counter.most_common(COMMON_HINTS))
    return f"<td><ol>{listed}</ol></td>"


def write_class_summary(by_student: dict, hand: dict, path: str | os.PathLike,
                        chapters: Sequence[str] | None = None, title: str = "Class summary") -> Path:
    """Write the class's page to ``path`` from ``by_student`` (:func:`.gradebook.students`) and the hand-scored
    points ``hand`` (:func:`.gradebook.read_written_csv`) for ``chapters``; returns the path."""
    chosen_items = items(chapters)
    chosen = sorted({i.chapter for i in chosen_items})
    graded = {key: r for key, r in by_student.items() if r.get("graded")}
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p>{len({s for s, _ in by_student})} student(s), {len(by_student)} notebook(s), {len(graded)} graded; "
             f"chapters {', '.join(chosen)}.</p>"]
    for chapter in chosen:
        reports = [r for (s, c), r in sorted(graded.items()) if c == chapter]
        rows = []
        for item in (i for i in chosen_items if i.chapter == chapter and not i.by_hand):
            outcomes = [r["tasks"].get(item.id) for r in reports]
            outcomes = [t for t in outcomes if isinstance(t, dict)]
            full = sum(t["points"] == t["max_points"] for t in outcomes)
            mean = sum(t["points"] for t in outcomes) / len(outcomes) if outcomes else None
            hints = Counter("not implemented yet" if str(t.get("message", "")).startswith("not implemented")
                            else (t.get("hint") or t.get("message") or t.get("status") or "?").strip()
                            for t in outcomes if not t["passed"])
            rows.append([_cell(item.id), _cell(TASKS[item.id].title), _cell(item.points, True),
                         _cell(f"{full} of {len(reports)}", True),
                         _cell("–" if mean is None else f"{mean:.2f}", True),
                         _hints(hints)])
        parts.append(_table(f"Chapter {chapter}: the checked tasks ({len(reports)} graded notebook(s))",
                            ["task", "title", "points", "full points", "mean points", "most common hints when missed"],
                            rows))
        hand_rows = []
        for item in (i for i in chosen_items if i.chapter == chapter and i.by_hand):
            given = [hand[(s, item.id)] for (s, c) in graded if c == chapter and (s, item.id) in hand]
            answered = sum(((r.get("written") or {}).get(item.question) or {}).get("status") == "answered"
                           for r in reports)
            hand_rows.append([_cell(item.id), _cell(QUESTIONS[item.question].title), _cell(item.points, True),
                              _cell(f"{answered} of {len(reports)}", True),
                              _cell(f"{len(given)} of {len(reports)}", True),
                              _cell(f"{sum(given) / len(given):.2f}" if given else "–", True)])
        if hand_rows:
            parts.append(_table(f"Chapter {chapter}: the answers scored by hand",
                                ["item", "question", "points", "answered", "scored", "mean points"], hand_rows))
    columns, rows = gradebook_rows(by_student, hand, chapters, "course")
    keep = ["student", *(f"{c} total" for c in chosen), "status", "flags"]
    student_rows = [[_cell(row[columns.index(k)], k.endswith("total")) for k in keep] for row in rows]
    maxima = chapter_maxima(chapters)
    parts.append(_table("Each student: the chapters' totals (checked and hand-scored points), or why there is none",
                        ["student", *(f"{c} (of {maxima[c]})" for c in chosen), "status", "flags"], student_rows))
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_STYLE}</style></head>'
            f"<body><main>{''.join(parts)}</main></body></html>\n")
    write_atomic(Path(path), page)
    return Path(path)
