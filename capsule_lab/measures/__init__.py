"""What any trained capsule network does, measured the same way whatever routes it (chapters 03–08).

- :mod:`~capsule_lab.measures.parse_trees` — parse trees (chapter 05): quantised couplings and inference, the
  parse-tree dictionary, its keys and entropy, the one entropy ceiling, coupling saliency;
- :mod:`~capsule_lab.measures.pruning` — magnitude pruning (REM's way to low-entropy parse trees), SNIP, sparsity;
- :mod:`~capsule_lab.measures.capsule_stats` — capsule statistics and dead capsules, routing dynamics, per-capsule
  gradients (chapter 04);
- :mod:`~capsule_lab.measures.activity` — how active capsules are: the ladder paper's activity profile (chapter 06);
- :mod:`~capsule_lab.measures.gradients` — the gradient through routing by hand, its two terms (chapter 03);
- :mod:`~capsule_lab.measures.saliency` — Grad-CAM (Captum) beside the coupling saliency (chapter 05);
- :mod:`~capsule_lab.measures.cost` — what routing and training cost: time, FLOPs, memory (chapters 02, 06, 08).
"""

