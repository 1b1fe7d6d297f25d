"""What the runner keeps of a step's yielded values: a copy taken as the step ends, by torch's own methods,
never by methods the yielded object brings (a tensor subclass whose detach() and clone() return itself
would have the kept value filled in later, out of the step)."""

from __future__ import annotations

import pytest
import torch

from proflab.running import runner

pytestmark = pytest.mark.quick


class Itself(torch.Tensor):
    """The trick: a tensor whose copies are itself."""

    def detach(self):
        return self

    def clone(self, *args, **kwargs):
        return self


def test_a_yielded_tensor_is_copied_as_the_step_ends():
    value = torch.zeros(3)
    kept = runner._keep({"out": value, "n": 2}, 0, torch)
    value += 1  # changed after the step: the kept copy is not
    assert kept["out"].tolist() == [0.0, 0.0, 0.0] and kept["n"] == 2
    assert type(kept["out"]) is torch.Tensor


def test_a_parameter_is_kept_as_a_plain_copy():
    kept = runner._keep({"w": torch.nn.Parameter(torch.ones(2))}, 0, torch)
    assert kept["w"].tolist() == [1.0, 1.0] and not kept["w"].requires_grad


@pytest.mark.parametrize("out, said", [
    ({"out": torch.zeros(2).as_subclass(Itself)}, "yielded 'out' as a Itself, a subclass of torch.Tensor"),
    ({"out": "text"}, "yielded 'out' as a str"),
    ([1, 2], "step 4 yielded a list"),
])
def test_what_is_not_a_plain_tensor_or_number_is_refused_named(out, said):
    with pytest.raises(runner._Failure) as refused:
        runner._keep(out, 4, torch)
    assert refused.value.kind == "bad_yield" and said in refused.value.message
