"""The examples in the module docstrings run and print what they claim."""

import doctest

import pytest

from gptlineage.tabular import csv_loader, dataset, settings, shuffle


@pytest.mark.parametrize("module", [shuffle, dataset, csv_loader, settings])
def test_docstring_examples(module) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
