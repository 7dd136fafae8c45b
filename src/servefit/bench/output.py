"""Where a run's files go: ``requests.jsonl`` line by line as requests end, the summary
documents at the end, and the ``--output`` folder checked before anything is sent.

A folder that cannot be written (a path under a file, no permission, a read-only disk) is
an :class:`~servefit.errors.InvalidArgumentError` naming it, raised before the first
request; a failure to write later (the disk filled up) is the same error, raised after
every record that could be written was.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from servefit.adapters.redact import redact_text, write_text
from servefit.errors import InvalidArgumentError


class _Line(Protocol):
    def model_dump_json(self) -> str: ...


R = TypeVar("R", bound=_Line)


def _unwritable(directory: Path, error: OSError) -> InvalidArgumentError:
    reason = error.strerror or type(error).__name__
    return InvalidArgumentError(
        f"--output {directory}: cannot write there ({reason}); give a folder you can write to"
    )


def prepare_output(directory: Path) -> None:
    """Create ``directory`` and prove it writable (a file made and removed in it)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        raise _unwritable(directory, error) from None


def write_document(directory: Path, name: str, doc: Any) -> None:
    """A pydantic document as indented JSON (``summary.json``, ``sweep.json``)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_text(directory / name, doc.model_dump_json(indent=2))
    except OSError as error:
        raise _unwritable(directory, error) from None


@dataclass(slots=True)
class ResultWriter(Generic[R]):
    """Appends each record to ``filename`` (a bench's requests.jsonl, an eval's items.jsonl)
    as it completes (nothing held back)."""

    directory: Path | None
    listener: Callable[[R], None] | None = None  # e.g. a progress bar
    filename: str = "requests.jsonl"
    records: list[R] = field(default_factory=list)
    error: OSError | None = None  # the first failed write: the records are kept in memory
    _file: Any = None

    def __post_init__(self) -> None:
        if self.directory is not None:
            prepare_output(self.directory)
            try:
                self._file = (self.directory / self.filename).open("a", encoding="utf-8")
            except OSError as error:
                raise _unwritable(self.directory, error) from None

    def __call__(self, record: R) -> None:
        self.records.append(record)
        if self._file is not None and self.error is None:
            try:
                self._file.write(redact_text(record.model_dump_json()) + "\n")
                self._file.flush()
            except OSError as error:
                self.error = error  # raised once the run is over (see check)
        if self.listener is not None:
            self.listener(record)

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError as error:
                self.error = self.error or error
            self._file = None

    def check(self) -> None:
        """Raise the first write error, if any (after the run: no request is cut by it)."""
        if self.error is not None and self.directory is not None:
            raise _unwritable(self.directory, self.error)
