"""Four user mistakes get innergraph's own error naming the builder, the argument and what was expected (issue 49).

Before, each got PyTensor's message or a cryptic one ("Please provide None as
outputs_info ...", "... has 1 dimension(s), while ... has 1 dimension(s)", "Cannot
convert 'o' to a tensor variable", "a state shaped (<class 'tuple'>, [None, None])").
Each test also checks that nothing the user passed was changed by the failed call.
"""

import copy

import pytensor.tensor as pt
import pytest

import innergraph
from innergraph import ArityError, BodyTypeError


@pytest.mark.parametrize(
    ("step", "outputs_info", "message"),
    [
        (lambda y: (y**2, y + 1), lambda x0: [x0], "scan: fn returns 2 outputs but outputs_info has 1 entry; expected one output of fn per entry of outputs_info"),
        (lambda y, z: y**2, lambda x0: [x0, x0], "scan: fn returns 1 output but outputs_info has 2 entries; expected one output of fn per entry of outputs_info"),
    ],
    ids=["more", "fewer"],
)
def test_scan_step_returning_another_number_of_outputs_than_outputs_info(step, outputs_info, message):
    x0 = pt.dscalar("x0")
    info = outputs_info(x0)
    with pytest.raises(ArityError) as error:
        innergraph.scan(step, outputs_info=info, n_steps=4, return_updates=False)
    assert str(error.value).startswith(message)
    assert info == outputs_info(x0) and x0.owner is None


def test_scan_step_returning_a_vector_for_a_scalar_carry():
    x0 = pt.dscalar("x0")
    info = [{"initial": x0}]  # pytensor.scan writes default taps into such dicts: ours are copied first
    with pytest.raises(BodyTypeError) as error:
        innergraph.scan(lambda y: pt.stack([y, y]), outputs_info=info, n_steps=4, return_updates=False)
    assert str(error.value) == (
        "scan: output 0 of fn (MakeVector{dtype='float64'}.0) is a vector (Vector(float64, shape=(2,))), but "
        "outputs_info[0]['initial'] (x0) is a scalar (Scalar(float64, shape=())); expected a scalar: a carried "
        "output has its initial state's number of dimensions at every step"
    )
    assert info == [{"initial": x0}]


def test_scan_checks_keep_every_valid_form_working_and_leave_the_callers_dicts_alone():
    x0, xs, m = pt.dscalar("x0"), pt.dvector("xs"), pt.dvector("m")
    taps = {"initial": m, "taps": [-2, -1]}
    before = copy.copy(taps)
    fib = innergraph.scan(lambda a, b: a + b, outputs_info=[taps], n_steps=4, return_updates=False)
    assert fib.eval({m: [1.0, 1.0]}).tolist() == [2.0, 3.0, 5.0, 8.0]
    assert taps == before
    seq = {"input": xs}
    mapped, summed = innergraph.scan(lambda v, c: (v * 2, c + v), sequences=[seq], outputs_info=[None, x0], return_updates=False)
    assert seq == {"input": xs}  # pytensor.scan alone would add "taps": [0]
    explicit_none = {"initial": x0, "taps": None}  # PyTensor warns and reads taps [-1]
    with pytest.warns(UserWarning, match="taps is explicitly set to None"):
        halved = innergraph.scan(lambda c: c / 2, outputs_info=[explicit_none], n_steps=2, return_updates=False)
    assert halved.eval({x0: 4.0}).tolist() == [2.0, 1.0] and explicit_none["taps"] is None
    assert summed.eval({xs: [1.0, 2.0], x0: 0.5}).tolist() == [1.5, 3.5]
    with pytest.raises(BodyTypeError, match=r"stacks the states of taps \[-2, -1\] along its first axis; expected a scalar"):
        innergraph.scan(lambda a, b: pt.stack([a, b]), outputs_info=[taps], n_steps=4, return_updates=False)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda x: innergraph.call(lambda v: "oops", x), "call: fn returns the Python string 'oops'; expected a variable, or a list or tuple of variables"),
        (lambda x: innergraph.scan(lambda v: "oops", sequences=[x], return_updates=False), "scan: fn returns the Python string 'oops'; expected a variable, or a list or tuple of variables"),
        (lambda x: innergraph.ifelse(x.sum() > 0, "oops", x), "ifelse: then_branch is the Python string 'oops'; a branch is a variable or a list of variables"),  # type: ignore[arg-type]
        (lambda x: innergraph.while_loop(lambda s: s.sum() < 3, lambda s: "oops", x), "while_loop: body_fun returns the Python string 'oops'; a state is tensors"),
        (lambda x: innergraph.call(lambda v: None, x), "call: fn returns None (a missing `return`?)"),
    ],
    ids=["call", "scan", "ifelse", "while_loop", "call-None"],
)
def test_a_body_returning_a_python_string(build, message):
    x = pt.dvector("x")
    with pytest.raises(BodyTypeError) as error:
        build(x)
    assert str(error.value).startswith(message)
    assert x.owner is None and x.name == "x"


def test_while_loop_body_returning_a_tuple_for_a_scalar_state():
    x = pt.dscalar("x")
    with pytest.raises(BodyTypeError) as error:
        innergraph.while_loop(lambda s: s < 10, lambda s: (s + 1, s), x)
    assert str(error.value) == (
        "while_loop: body_fun returns a tuple (tensor, tensor), but the state (init_val) is a single tensor; "
        "expected the next state, structured as init_val (the same containers, one value per carried value)"
    )
    state = (x, {"k": x})
    with pytest.raises(BodyTypeError, match=r"body_fun returns a tuple \(tensor,\), but the state \(init_val\) is a tuple \(tensor, \{'k': tensor\}\)"):
        innergraph.while_loop(lambda s: s[0] < 10, lambda s: (s[0],), state)
    assert state == (x, {"k": x}) and x.owner is None


def test_the_errors_are_the_exceptions_pytensor_users_already_catch():
    assert issubclass(ArityError, TypeError) and issubclass(BodyTypeError, TypeError)
