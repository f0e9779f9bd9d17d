"""Shared fixtures."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: a second thread only adds synchronisation (and stalls on a busy machine).

    Use with `pytestmark = pytest.mark.usefixtures("one_thread")` in a test module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
