"""Files of any size on their way in and out: a body streamed from a path, a file object or
bytes, and one streamed into a path or a file object, a MiB at a time (never whole in
memory), with a progress callback `progress(done_bytes, total_bytes or None)`."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

Progress = Callable[[int, int | None], None]
Source = str | os.PathLike[str] | bytes | BinaryIO
Target = str | os.PathLike[str] | BinaryIO

PIECE = 1024 * 1024


@dataclass(frozen=True)
class Upload:
    source: Source
    progress: Progress | None = None

    def size(self) -> int:
        """The body's length, which the server wants first (a file object must be seekable)."""
        source = self.source
        if isinstance(source, bytes):
            return len(source)
        if isinstance(source, str | os.PathLike):
            return os.stat(source).st_size
        if not source.seekable():
            raise ValueError("a file object that cannot seek must be read into bytes first")
        here = source.tell()
        end = source.seek(0, os.SEEK_END)
        source.seek(here)
        return end - here

    def chunks(self) -> Iterator[bytes]:
        total = self.size()
        done = 0
        if self.progress:
            self.progress(0, total)
        for piece in self._pieces():
            done += len(piece)
            yield piece
            if self.progress:
                self.progress(done, total)

    async def achunks(self) -> AsyncIterator[bytes]:
        for piece in self.chunks():  # a MiB read from a local file at a time
            yield piece

    def _pieces(self) -> Iterator[bytes]:
        source = self.source
        if isinstance(source, bytes):
            for start in range(0, len(source), PIECE):
                yield source[start : start + PIECE]
            return
        if isinstance(source, str | os.PathLike):
            with open(source, "rb") as file:
                yield from iter(lambda: file.read(PIECE), b"")
            return
        yield from iter(lambda: source.read(PIECE), b"")


@dataclass(frozen=True)
class Received:
    """A download's response (its headers) and how many bytes were written from it."""

    response: Any
    size: int


@dataclass(frozen=True)
class Download:
    target: Target
    progress: Progress | None = None

    def write(self, pieces: Iterator[bytes], total: int | None) -> int:
        with self._opened() as (file, done):
            for piece in pieces:
                file.write(piece)
                self._advance(done, len(piece), total)
            done.finish()
        return done.count

    async def awrite(self, pieces: AsyncIterator[bytes], total: int | None) -> int:
        with self._opened() as (file, done):
            async for piece in pieces:
                file.write(piece)
                self._advance(done, len(piece), total)
            done.finish()
        return done.count

    def _advance(self, done: _Written, size: int, total: int | None) -> None:
        done.count += size
        if self.progress:
            self.progress(done.count, total)

    def _opened(self) -> _Opened:
        return _Opened(self.target)


class _Written:
    def __init__(self, finish: Callable[[], None]) -> None:
        self.count = 0
        self.finish = finish


class _Opened:
    """A target opened for writing: a path gets a temporary file beside it, renamed over it
    once the download is whole (an interrupted one leaves the path as it was)."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._temporary: str | None = None

    def __enter__(self) -> tuple[BinaryIO, _Written]:
        target = self._target
        if not isinstance(target, str | os.PathLike):
            return target, _Written(lambda: None)
        path = Path(target)
        handle, self._temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        file = os.fdopen(handle, "wb")
        self._file = file

        def finish() -> None:
            file.close()
            os.replace(self._temporary or "", path)
            self._temporary = None

        return file, _Written(finish)

    def __exit__(self, *_: object) -> None:
        if self._temporary is not None:
            self._file.close()
            with suppress(OSError):
                os.unlink(self._temporary)


def expected_size(response: Any) -> int | None:
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None
