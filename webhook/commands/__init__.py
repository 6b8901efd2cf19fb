"""A container's command read as the shell and the MPI launchers read it: which values of given
environment variables each process it starts will see. `reader` is the entry point; `shell`
holds a script's syntax, `launchers` the launcher table (data), `text` the cheap textual
readings, `python` `python -c` code."""
