"""The evidence layer: the tests every verdict uses and the tables results are shown in (chapters 02–08).

- :mod:`~capsule_lab.evidence.stats` — paired t over seeds, exact and pooled McNemar, TOST, Holm, power;
- :mod:`~capsule_lab.evidence.rules` — the verdict rules: premises, nulls, collapse, convergence, timing, families,
  outcomes;
- :mod:`~capsule_lab.evidence.claims` — a paper's claim or the course's question, and its verdict on a study's records;
- :mod:`~capsule_lab.evidence.tables` — result tables that are tables (HTML, aligned text, CSV).
"""

