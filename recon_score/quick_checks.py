"""Checks that answer in a fraction of a second, before torch, diffusers or a model package is imported: a
wrong path, column or name, or a missing model, is the commonest first mistake and must not wait for seconds of
imports or hub retries. The run checks everything again; these only bring the answer forward.
"""

from __future__ import annotations

from pathlib import Path


def is_fresh(out: Path) -> bool:
    """No earlier run in `out`: a resumed or finished run may not need its models again, so it is not asked."""
    out = Path(out)
    return not out.is_dir() or not any(out.iterdir())


def check_input_file(path: Path | str | None, what: str) -> None:
    """`path`, when given, is a regular file (the reader's own message, "PATH: WHAT not found" and kin)."""
    from recon_score.errors import InputError
    from recon_score.textfiles import file_problem

    problem = None if path is None else file_problem(path)
    if problem:
        raise InputError(f"{path}: {what} {problem}")


def check_recon_job(job, *, command: str = "score") -> None:
    """A `score` job: its captions table (file, format, columns, image root) and the encoder's spelling, without
    torch; then, for a fresh run folder, every model its preset needs, looked up locally (recon_score.preflight:
    no download, no hub retries; a family's weights check may import torch, everything cheaper comes first)."""
    from recon_score.encoders import parse_spec
    from recon_score.inputs import read_caption_rows

    if job.rows is None and job.captions is not None:
        read_caption_rows(job.captions, root=job.images_root)
    parse_spec(job.preset.encoder)
    if is_fresh(job.out):
        from recon_score.preflight import recon_needs, require_models

        require_models(recon_needs(job.preset, job.weights_dir), command=command)
