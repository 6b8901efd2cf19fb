"""The shell variables as the command reader (`webhook.commands.reader`) tracks them: each
variable's possible values, whether it is exported and where it was assigned, and a shell state
that branches copy and merge. Kept apart from the reading so that each stays readable."""

from __future__ import annotations


class Var:
    """A variable as the command leaves it: its possible values (None: one not known here, or
    the inherited one), whether it is exported, whether its values are the command's own (else
    it only marks a variable of the container env, which the env rules judge already)."""

    __slots__ = ("values", "exported", "own", "origin")

    def __init__(self, values: list[str | None], exported: bool, own: bool = True, origin: str | None = None):
        self.values = values
        self.exported = exported
        self.own = own
        self.origin = origin  # the script file (`Files`) that assigned it, if any


class State:
    __slots__ = ("vars", "allexport", "cleared")

    def __init__(self, variables: dict[str, Var], allexport: bool = False, cleared: bool = False):
        self.vars = variables
        self.allexport = allexport
        self.cleared = cleared  # `env -i`: the container env is not inherited

    def copy(self) -> State:
        return State(
            {k: Var(list(v.values), v.exported, v.own, v.origin) for k, v in self.vars.items()},
            self.allexport,
            self.cleared,
        )

    def child(self) -> State:
        """What a started process inherits: the exported variables."""
        return State(
            {k: Var(list(v.values), True, v.own, v.origin) for k, v in self.vars.items() if v.exported},
            False,
            self.cleared,
        )

    def merge(self, other: State) -> None:
        """Either this state or `other` holds afterwards (a branch that may have run)."""
        for k, v in other.vars.items():
            mine = self.vars.get(k)
            if mine is None:
                values: list[str | None] = [None]  # before the branch: as inherited
                values.extend(v.values)
                self.vars[k] = Var(values, v.exported, v.own, v.origin)
            else:
                for value in v.values:
                    if value not in mine.values:
                        mine.values.append(value)
                mine.exported = mine.exported or v.exported
                mine.own = mine.own or v.own
                if mine.origin is None:
                    mine.origin = v.origin
        self.allexport = self.allexport or other.allexport
