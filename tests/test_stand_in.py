"""One of PyTensor's passes swapped for innergraph's stand-in, and back (`innergraph.rewriting.stand_in`).

Each user of `StandIn` is swapped in a stand-in ``optdb`` (or a stand-in ``scan_eqopt2``
inside one) holding PyTensor's pass under its name and a tag: the stand-in takes its place
under both, once, with its name; ``restore`` puts PyTensor's object back. A database that
is not PyTensor's registration as released (two of PyTensor's passes under the name, none,
the stand-in already, no such pass or no such database) is left alone.
"""

from typing import Any

import pytensor.compile.mode
import pytest
from pytensor.scan.rewriting.inplace import ScanInplaceOptimizer
from pytensor.scan.rewriting.merge import ScanMerge

from innergraph.rewriting import scan_inplace, scan_merge
from innergraph.rewriting.scan_inplace import SharedScanInplace
from innergraph.rewriting.scan_merge import ScopedScanMerge


class FakeDB:
    """A stand-in for ``optdb`` or one of its databases: names (and tags) to sets of rewriters."""

    def __init__(self, **members: Any):
        self.__db__: dict[str, set[Any]] = {name: set(rewriters) for name, rewriters in members.items()}

    def __getitem__(self, name: str) -> Any:
        (only,) = self.__db__[name]
        return only


#: The users: the module, PyTensor's class, the stand-in's class, the pass's database in ``optdb`` (None: ``optdb``).
USERS = [
    (scan_inplace, ScanInplaceOptimizer, SharedScanInplace, None),
    (scan_merge, ScanMerge, ScopedScanMerge, "scan_eqopt2"),
]


@pytest.mark.parametrize(("module", "theirs_class", "ours_class", "database"), USERS, ids=["scan_make_inplace", "scan_merge"])
def test_replacing_pytensors_pass_in_a_db(monkeypatch: Any, module: Any, theirs_class: Any, ours_class: Any,
                                          database: str | None) -> None:
    name = module.PASS_NAME

    def install(db: FakeDB) -> FakeDB:
        monkeypatch.setattr(pytensor.compile.mode, "optdb", db if database is None else FakeDB(**{database: [db]}))
        return db

    monkeypatch.setattr(module.STAND_IN, "swapped", [])
    theirs = theirs_class()
    theirs.name = name
    db = install(FakeDB(**{name: [theirs], "tag": [theirs], "other": []}))
    module.replace_pytensor_pass()
    (ours,) = db.__db__[name]
    assert type(ours) is ours_class and ours.name == name
    assert db.__db__["tag"] == {ours} and db.__db__["other"] == set()
    module.replace_pytensor_pass()  # once only
    assert db.__db__[name] == {ours} and len(module.STAND_IN.swapped) == 1
    module.restore_pytensor_pass()
    assert db.__db__ == {name: {theirs}, "tag": {theirs}, "other": set()} and module.STAND_IN.swapped == []
    # two PyTensor rewriters under the name, or none of PyTensor's class: not the registration as released, left alone
    for members in ([theirs, theirs_class()], [], [ours_class()]):
        db = install(FakeDB(**{name: members}))
        module.replace_pytensor_pass()
        assert db.__db__ == {name: set(members)} and module.STAND_IN.swapped == []
    db = install(FakeDB(tag=[theirs]))  # no pass of that name
    module.replace_pytensor_pass()
    assert db.__db__ == {"tag": {theirs}} and module.STAND_IN.swapped == []
    if database is not None:  # no such database
        db = FakeDB(other=[theirs])
        monkeypatch.setattr(pytensor.compile.mode, "optdb", db)
        module.replace_pytensor_pass()
        assert db.__db__ == {"other": {theirs}} and module.STAND_IN.swapped == []
