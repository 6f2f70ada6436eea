"""The grading's notebooks: the exercises made from the masters, and students' notebooks graded into reports
(``capsule-lab assign``, ``grade``, ``grade-merge``, ``gradebook``; exercises 01–08).

The top of grading's three layers (tasks ← engine ← notebooks): it reads the tasks
(:mod:`capsule_lab.grading.tasks`) and scores with the engine (:mod:`capsule_lab.grading.engine`); nothing below
imports it. Every module here takes or makes notebook files. Inside, each module imports only those above it in
this list:

- :mod:`.assign`: the student notebooks in ``exercises/`` generated from ``solutions/``;
- :mod:`.atomic`: the grader's files written atomically;
- :mod:`.written`: the written answers read from a notebook's cells, and ``written.md``;
- :mod:`.gradebook`: a class's reports as one row per student, the hand-scored points of ``written.csv`` merged
  in, the learning platforms' imports;
- :mod:`.class_summary`: a class's results on one HTML page;
- :mod:`.kernel`: a notebook run in a kernel for its outputs, errors and timeouts (nbclient) — reported, never
  scored;
- :mod:`.report`: one notebook graded into its report (:func:`~.report.grade_notebook`);
- :mod:`.folder`: a folder of reports read back, ``grades.csv`` rebuilt, shards' folders merged;
- :mod:`.workers`: worker processes that grade a class's notebooks in parallel;
- :mod:`.batch`: grading a class (:func:`~.batch.grade_batch`, :func:`~.batch.grade`): resumed by content hash, in
  shards.
"""
