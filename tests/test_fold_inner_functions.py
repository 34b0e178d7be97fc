"""An OpFromGraph of constants folded in Python (`innergraph.rewriting.fold_inner_functions`).

PyTensor folds such a node by linking its inner graph with C thunks (a C compilation
per inner node kind on an empty cache); innergraph's folding pass evaluates it inner
node by inner node, as PyTensor folds any other node. Checked: the compiled graph is
vanilla's, constant for constant; no inner function is linked while compiling; what
cannot be evaluated so is left to PyTensor; uninstalling puts PyTensor's pass back.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.inner_function import HasInnerFunction
from pytensor.compile.mode import optdb
from pytensor.graph.basic import Apply, Constant, Variable, equal_computations
from pytensor.graph.op import Op
from pytensor.tensor.rewriting.basic import topo_constant_folding

import innergraph
from innergraph.rewriting import fold_inner_functions as fold
from vanilla import vanilla_function


@pytest.fixture
def linked(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The inner-function Ops whose inner graph gets linked (a C thunk per inner node under the vm linker)."""
    ops: list[Any] = []
    original = HasInnerFunction.compile_fn

    def counting(self: Any, mode: Any) -> Any:
        ops.append(self)
        return original(self, mode)

    monkeypatch.setattr(HasInnerFunction, "compile_fn", counting)
    return ops


def _diag_of_folded_input() -> tuple[list[Any], Any]:
    """``x @ diag(exp(arange(2.)))``: the diagonal's input is folded in the same walk as the diagonal itself."""
    x = pt.dmatrix("x")
    return [x], x @ pt.diag(pt.exp(pt.arange(2.0)))


def _diag_of_constant() -> tuple[list[Any], Any]:
    """``x + diag([1., 2.])``: an ``AllocDiag`` of a constant from the start."""
    x = pt.dmatrix("x")
    return [x], x + pt.diag(pt.constant(np.array([1.0, 2.0])))


def _nested() -> tuple[list[Any], Any]:
    """A plain OpFromGraph of a constant whose inner graph holds an ``AllocDiag``."""
    a = pt.dvector("a")
    ofg = OpFromGraph([a], [pt.diag(a) * 2.0 + 1.0])
    x = pt.dmatrix("x")
    return [x], x - ofg(pt.constant(np.array([0.5, 3.0])))


@pytest.mark.parametrize("build", [_diag_of_folded_input, _diag_of_constant, _nested], ids=["folded-input", "constant", "nested"])
def test_a_constant_inner_function_folds_to_vanillas_constant_without_linking(build: Any, linked: list[Any]) -> None:
    value = np.arange(4.0).reshape(2, 2) + 0.25
    reference = vanilla_function(build, mode="FAST_RUN", first_call=[value])
    assert linked, "vanilla links the inner graph to fold it: this check could not fail"
    linked.clear()
    inputs, output = build()
    fn = pytensor.function(inputs, output, mode="FAST_RUN")
    assert linked == []
    assert not any(isinstance(node.op, OpFromGraph) for node in fn.maker.fgraph.apply_nodes)
    assert equal_computations(fn.maker.fgraph.outputs, reference.maker.fgraph.outputs, fn.maker.fgraph.inputs, reference.maker.fgraph.inputs)
    np.testing.assert_array_equal(fn(value), reference(value))


def test_the_evaluation_is_each_inner_nodes_own() -> None:
    a = pt.dvector("a")
    ofg = OpFromGraph([a], [pt.exp(a).sum(), pt.diag(a)[::-1]])
    data = np.array([0.3, -1.7, 2.0])
    values = fold.evaluate_inner_function(ofg, [data])
    assert values is not None
    total, flipped = values
    assert total == np.exp(data).sum()
    np.testing.assert_array_equal(flipped, np.diag(data)[::-1])


def test_an_inner_graph_it_cannot_walk_is_left_to_pytensor() -> None:
    a = pt.dvector("a")
    loop = pytensor.scan(lambda v, acc: acc + v, sequences=[a], outputs_info=[pt.zeros(())], return_updates=False)
    ofg = OpFromGraph([a], [loop[-1]])
    assert fold.evaluate_inner_function(ofg, [np.array([1.0, 2.0])]) is None
    node = _node(ofg(pt.constant(np.array([1.0, 2.0]))))
    assert fold.local_fold_inner_function.transform(None, node) is None


def test_uninstalling_puts_pytensors_pass_back_under_its_name() -> None:
    def passes() -> list[set[Any]]:
        return [set(optdb[name].__db__[fold.PASS_NAME]) for name in fold.DATABASES]

    installed = passes()
    assert all(len(p) == 1 and topo_constant_folding not in p for p in installed)
    # each is its database's final pass, as PyTensor's (an EquilibriumDB finds those by name)
    assert all(optdb[name].query("+fast_run").final_rewriters == list(p) for name, p in zip(fold.DATABASES, installed))
    with innergraph.uninstalled():
        assert all(p == {topo_constant_folding} for p in passes())
        assert all(optdb[name].query("+fast_run").final_rewriters == [topo_constant_folding] for name in fold.DATABASES)
    assert passes() == installed


def _node(out: Any) -> Any:
    assert isinstance(out, Variable) and out.owner is not None
    return out.owner


def test_the_folded_constant_is_narrowed_as_pytensors() -> None:
    a = pt.dvector("a")
    node = _node(OpFromGraph([a], [a * 2.0])(pt.constant(np.array([1.0, 2.0, 4.0]))))
    assert node.outputs[0].type.shape == (None,)
    (out,) = fold.local_fold_inner_function.transform(None, node)
    assert isinstance(out, Constant) and out.type.shape == (3,)
    np.testing.assert_array_equal(out.data, [2.0, 4.0, 8.0])


def test_a_node_pytensor_would_not_fold_is_left_alone() -> None:
    a, b = pt.dvectors("a", "b")
    x = pt.dvector("x")
    constant = pt.constant(np.array([1.0, 2.0]))
    # a symbolic input (a constant second: fed to the first inner input, it would give 2 * constant)
    assert fold.local_fold_inner_function.transform(None, _node(OpFromGraph([a, b], [a * 2.0])(x, constant))) is None
    assert fold.local_fold_inner_function.transform(None, _node(OpFromGraph([a, b], [a * 2.0])(constant, x))) is None

    class Unfoldable(OpFromGraph):
        def do_constant_folding(self, fgraph: Any, node: Any) -> bool:
            return False

    assert fold.local_fold_inner_function.transform(None, _node(Unfoldable([a], [a * 2.0])(constant))) is None
    node = _node(OpFromGraph([a], [a * 2.0])(constant))
    assert fold.local_fold_inner_function.transform(None, node) is not None
    with innergraph.uninstalled():
        assert fold.local_fold_inner_function.transform(None, node) is None


def test_a_lazy_inner_ifelse_is_evaluated() -> None:
    from pytensor.conditional.op import ifelse

    a = pt.dvector("a")
    chosen: Any = ifelse(a.sum() > 0, a * 3.0, -a)
    ofg = OpFromGraph([a], [chosen])
    for data, expected in ((np.array([1.0, 2.0]), [3.0, 6.0]), (np.array([-1.0, -2.0]), [1.0, 2.0])):
        values = fold.evaluate_inner_function(ofg, [data])
        assert values is not None
        np.testing.assert_array_equal(values[0], expected)


class _Doubled(Op):
    """x * 2 with no Python implementation: only its default thunk (``default``), or none at all."""

    def __init__(self, default: bool) -> None:
        self.default = default

    def make_node(self, *inputs: Any) -> Apply:
        x = pt.as_tensor(inputs[0])
        return Apply(self, [x], [x.type()])

    def perform(self, node: Any, inputs: Any, outputs: Any) -> None:
        raise NotImplementedError("no Python implementation")

    def make_thunk(self, node: Any, storage_map: Any, compute_map: Any, no_recycling: Any, impl: Any = None) -> Any:
        if impl == "py" or not self.default:
            raise NotImplementedError("no such implementation")

        def thunk() -> None:
            storage_map[node.outputs[0]][0] = storage_map[node.inputs[0]][0] * 2
            compute_map[node.outputs[0]][0] = True

        return thunk


def test_an_inner_op_without_a_python_implementation_runs_its_default_one_or_is_left_to_pytensor() -> None:
    a = pt.dvector("a")
    data = np.array([1.0, 5.0])
    doubled: Any = _Doubled(True)(a)
    values = fold.evaluate_inner_function(OpFromGraph([a], [doubled + 1.0]), [data])
    assert values is not None
    np.testing.assert_array_equal(values[0], [3.0, 11.0])
    undoubled: Any = _Doubled(False)(a)
    assert fold.evaluate_inner_function(OpFromGraph([a], [undoubled + 1.0]), [data]) is None
