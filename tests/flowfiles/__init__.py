"""Tests of YAML flow files and the steps workers run from them (script, http,
templates): they need the ``flows`` extra, so they live outside ``tests/unit``, which runs
with only the base install."""
