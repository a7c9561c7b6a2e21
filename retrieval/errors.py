"""Errors raised by the retrieval package. Each names the item, what was expected and the fix; the CLI prints
them (they are ReconScoreErrors) and exits 1."""

from __future__ import annotations

from recon_score.errors import InputError, ReconScoreError


class MethodUnavailableError(ReconScoreError):
    """A method cannot run with what this run has (no text encoder, no checkpoint, no corpora ...). Never
    replaced by a stand-in: a faked method gives plausible-looking numbers."""

    def __init__(self, method: str, reason: str, fix: str):
        self.method, self.reason, self.fix = method, reason, fix
        super().__init__(f"method {method!r} cannot run: {reason}. {fix}")


class BundleError(InputError):
    """A features bundle (.npz) is malformed: a key is missing, misshapen, of the wrong dtype or not normalised."""

    def __init__(self, path: str, key: str, problem: str, fix: str):
        self.path, self.key = path, key
        super().__init__(f"{path}: {key!r} {problem}. {fix}")


class DatasetLayoutError(InputError):
    """A benchmark folder does not have the expected files, or a row names an image that is not there."""


class EmptyPositivesError(ReconScoreError):
    """Queries without any positive, under empty_positives='error'."""
