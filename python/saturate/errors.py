"""Exceptions raised by saturate.

Every error from the C++ engine is a :class:`saturate.Error` whose message is
the engine's, whole (dataset, shard, record, field or option named). The
subclasses also derive from the matching built-in exception, so ``except
FileNotFoundError`` or ``except ValueError`` work as a Python user expects.
"""


class Error(Exception):
    """Base class of every saturate error. ``code`` is the engine's status code name."""

    code = "unknown"


class InvalidArgumentError(Error, ValueError):
    """A bad option, flag or path was given."""

    code = "invalid_argument"


class NotFoundError(Error, FileNotFoundError):
    """A named dataset, file, field or record does not exist."""

    code = "not_found"


class AlreadyExistsError(Error, FileExistsError):
    """Refusing to overwrite something (e.g. pack without force=True)."""

    code = "already_exists"


class CorruptionError(Error):
    """Stored bytes fail a check (checksum, magic, bounds) or an image does not decode."""

    code = "corruption"


class IOError(Error, OSError):  # noqa: A001 - the engine's name; also an OSError
    """The operating system refused (open, read, write, fsync)."""

    code = "io_error"


class UnimplementedError(Error, NotImplementedError):
    """A valid request this build cannot serve (e.g. CUDA without a GPU)."""

    code = "unimplemented"


class InternalError(Error, RuntimeError):
    """A bug in saturate itself; please report it."""

    code = "internal"


class CancelledError(Error):
    """The work was stopped on request."""

    code = "cancelled"


class UnavailableError(Error, RuntimeError):
    """What was asked for is not on this machine, e.g. ``device="cuda"`` without a GPU."""

    code = "unavailable"


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        CorruptionError,
        IOError,
        UnimplementedError,
        InternalError,
        CancelledError,
        UnavailableError,
    )
}


def error_class(code: str) -> type:
    """The exception class for an engine status code name (called by the C++ module)."""
    return _BY_CODE.get(code, Error)
