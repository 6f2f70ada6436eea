"""Shared pytest set-up for tests/ (kept minimal on purpose).

Tests always use the quick profile unless the caller asks otherwise, so that a machine with a GPU does not
silently switch notebooks and grading runs to the papers' full settings.
"""

import os

os.environ.setdefault("CAPSULE_LAB_PROFILE", "quick")
