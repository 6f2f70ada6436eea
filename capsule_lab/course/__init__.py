"""The course's machinery: the profiles a chapter runs, the bands its numbers are checked in, the smoke run, the
epoch timing, what a chapter's training costs, where training runs keep their checkpoints and the full runs as
cluster jobs.

- :mod:`~capsule_lab.course.profiles` — the quick, gpu and full profiles, a chapter's setup and its settings;
- :mod:`~capsule_lab.course.tolerance` — a number from training checked within its stated band;
- :mod:`~capsule_lab.course.smoke` — every chapter's full-profile networks, two steps each, on any device;
- :mod:`~capsule_lab.course.epoch_timing` — one timed epoch of each chapter's main network;
- :mod:`~capsule_lab.course.session` — what a cell's training will cost, measured before it starts, and the gpu
  profile's budget (a Colab session) from the shipped GPU timings;
- :mod:`~capsule_lab.course.checkpoints` — where a chapter's training runs keep their checkpoints (Google Drive in
  Colab), so that a run survives a disconnect;
- :mod:`~capsule_lab.course.cluster` — a chapter's full multi-seed run as independent, resumable tasks (a Slurm job
  array) and their records merged.

The ``capsule-lab`` command that runs them (and the grader) is :mod:`capsule_lab.cli`, the package's top.
"""

