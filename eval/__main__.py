"""`python -m eval ...` is the same as `reconscore ...`."""

from eval.cli import run

run()
