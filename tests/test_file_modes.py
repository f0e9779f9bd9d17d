"""Artifacts are written with the process's umask (0644 files, 0755 directories under the usual 022),
so a shared results folder is readable to the group; safetensors alone would write 0600."""

import os
import stat

import pytest

from gptlineage.model.gpt import GPT, GPTConfig
from gptlineage.model.parameters import save_parameters


@pytest.fixture
def umask():
    """Set the umask for one test and put the old one back."""
    previous = os.umask(0o022)
    yield os.umask
    os.umask(previous)


def modes(root):
    """Every file's and directory's permission bits under root, by relative path."""
    return {
        path.relative_to(root): stat.S_IMODE(path.stat().st_mode) for path in root.rglob("*") if not path.is_symlink()
    }


def test_every_file_of_a_training_chain_follows_the_umask(tiny_chain):
    mask = os.umask(0o022)
    os.umask(mask)
    found = modes(tiny_chain)
    assert any(path.suffix == ".safetensors" for path in found)
    wrong = {
        str(path): oct(mode)
        for path, mode in found.items()
        if mode != ((0o777 if (tiny_chain / path).is_dir() else 0o666) & ~mask)
    }
    assert wrong == {}


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_parameter_file_takes_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    path = save_parameters(tmp_path / "p.safetensors", GPT(GPTConfig(context=4, vocab=16, width=4, heads=1, layers=1)))
    assert stat.S_IMODE(path.stat().st_mode) == expected
