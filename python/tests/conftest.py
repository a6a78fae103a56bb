import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


def _cuda_ok() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_configure(config):
    # gpu-run.sh sets this: on the GPU machine a missing torch or GPU must fail, not skip.
    if os.environ.get("TILELANG_REQUIRE_GPU") == "1" and not _cuda_ok():
        raise pytest.UsageError(
            "TILELANG_REQUIRE_GPU=1, but torch cannot be imported or sees no CUDA GPU")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs torch with a CUDA GPU (run on the GPU machine: "
                                   "python -m pytest python/tests -m gpu)")
    if _cuda_ok():
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
