"""Small Sphinx extension for the capsule-lab book (loaded from _config.yml: sphinx.local_extensions).

Sphinx 7.4 registers an inline script (a script with a body but no file) twice when an extension adds it
after the builder has started: once as ``filename=None`` and once as ``filename=''``. sphinx-thebe adds
``const THEBE_JS_URL = ...`` that way, so every page declared the constant twice and the browser reported
"Identifier 'THEBE_JS_URL' has already been declared". This drops such duplicates from each page.
"""

from __future__ import annotations


def _dedupe_inline_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen: set[tuple] = set()
    kept = []
    for js in scripts:
        filename = getattr(js, "filename", js)
        attributes = getattr(js, "attributes", {}) or {}
        if not filename and "body" in attributes:
            key = ("inline", getattr(js, "priority", 500), tuple(sorted(attributes.items())))
            if key in seen:
                continue
            seen.add(key)
        kept.append(js)
    scripts[:] = kept


def setup(app):
    app.connect("html-page-context", _dedupe_inline_scripts)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
