"""One chapter's experiment each, owning its quick and full settings (``SETTINGS``), its runs, records and claims.

- :mod:`~capsule_lab.studies.common` — what the experiments share: networks that start the same, shipped results;
- :mod:`~capsule_lab.studies.gradients` — chapter 03: full, detached and uniform routing side by side;
- :mod:`~capsule_lab.studies.depth` — chapter 04: deep CapsNets over depths and routings, dead capsules;
- :mod:`~capsule_lab.studies.rem`, :mod:`~capsule_lab.studies.rem_pictures`, :mod:`~capsule_lab.studies.rem_claims`,
  :mod:`~capsule_lab.studies.rem_confounds` — chapter 05: dense (Q) and pruned (REM) runs, the data its pictures take,
  the paper's claims, what else differs between Q and REM;
- :mod:`~capsule_lab.studies.ladder` — chapter 06: ladder networks over K against a CapsNet;
- :mod:`~capsule_lab.studies.learned_routing` — chapter 07: dynamic, similarity and connectionist routing;
- :mod:`~capsule_lab.studies.bench` — chapter 08: every router on one backbone, as a library.
"""

