"""A container's command read as the shell and the MPI launchers read it: which values of given
environment variables each process it starts will see. `reader` is the entry point and the walk
of the processes and scripts, `record` what a reading records as it goes; `shell` holds a
script's syntax, `source_words` what of a word is read from the script's bytes, `launchers` the
launcher table (data, one row per launcher), `text` the cheap textual readings, `python`
`python -c` code."""
