"""Temporary instance attributes (opcount.llm.patching.patched): each put back exactly as it was,
the block failing or not; an attribute the instance did not have of its own is gone again."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from opcount.errors import OpcountError
from opcount.llm.patching import patched


class Boom(Exception):
    pass


def test_a_failure_inside_the_block_restores_every_attribute() -> None:
    module = nn.Linear(2, 2)
    module.flag = False  # an attribute of the instance's own
    original_forward = module.forward
    with pytest.raises(Boom), patched([(module, "forward", print), (module, "flag", True)]):
        assert module.forward is print and module.flag is True
        raise Boom
    assert "forward" not in vars(module)  # absent before: absent again, the class's forward shows through
    assert module.forward == original_forward
    assert module.flag is False


def test_a_name_patched_twice_gets_its_first_value_back() -> None:
    holder = type("Holder", (), {})()
    holder.x = 1
    with patched([(holder, "x", 2), (holder, "x", 3), (holder, "y", 4)]):
        assert (holder.x, holder.y) == (3, 4)
    assert vars(holder) == {"x": 1}


def test_a_failure_while_setting_restores_what_was_set() -> None:
    module = nn.Linear(2, 2)
    module.register_buffer("kept", torch.zeros(1))

    def changes():  # the second change names a buffer: refused after the first was made
        yield module, "tag", "set"
        yield module, "kept", torch.ones(1)

    with pytest.raises(OpcountError, match=r"Linear\.kept is a parameter, buffer or submodule"), patched(changes()):
        pass
    assert "tag" not in vars(module)
    assert torch.equal(module.kept, torch.zeros(1))
