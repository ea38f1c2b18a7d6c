"""The bot API's calls for files of any size and for directories as archives, written once for
both clients (`boxyard_client._calls`): bodies stream from and to paths, file objects or bytes,
a MiB at a time, with `progress(done_bytes, total_bytes or None)` called as they go."""

from __future__ import annotations

from boxyard_client._calls import (
    Call,
    compact,
    endpoint,
    exec_path,
    octal_mode,
    parser,
    sandbox_path,
)
from boxyard_client._models import Downloaded, Extracted, FileInfo, FileLink, Uploaded
from boxyard_client._transfers import Download, Progress, Source, Target, Upload


class FileEndpoints:
    @endpoint
    def upload_file(
        self,
        sandbox_id: str,
        path: str,
        source: Source,
        *,
        mode: str | int | None = None,
        overwrite: bool = True,
        holder: str | None = None,
        epoch: int | None = None,
        progress: Progress | None = None,
    ) -> Call[Uploaded]:
        """Write a file of any size from a local path, a file object (seekable) or bytes,
        streamed; the answer has its size and sha256."""
        upload = Upload(source, progress)
        params = compact(
            {
                "path": path,
                "mode": octal_mode(mode),
                "overwrite": str(overwrite).lower(),
                "holder": holder,
                "epoch": epoch,
            }
        )
        return Call(
            "PUT",
            sandbox_path(sandbox_id, "files", "raw"),
            parser(Uploaded),
            params=params,
            upload=upload,
        )

    @endpoint
    def download_file(
        self,
        sandbox_id: str,
        path: str,
        target: Target,
        *,
        progress: Progress | None = None,
    ) -> Call[Downloaded]:
        """Stream a file into a local path (written beside it and renamed over it once whole)
        or a file object."""
        return Call(
            "GET",
            sandbox_path(sandbox_id, "files", "raw"),
            Downloaded.from_received,
            params={"path": path},
            download=Download(target, progress),
        )

    @endpoint
    def file_info(self, sandbox_id: str, path: str) -> Call[FileInfo]:
        """A file's size, ETag, type and modification time, without its bytes."""
        return Call(
            "HEAD",
            sandbox_path(sandbox_id, "files", "raw"),
            FileInfo.from_response,
            params={"path": path},
            whole=True,
        )

    @endpoint
    def download_archive(
        self,
        sandbox_id: str,
        path: str,
        target: Target,
        *,
        format: str = "tar.gz",
        progress: Progress | None = None,
    ) -> Call[Downloaded]:
        """Stream a directory as tar, tar.gz or zip into a local path or a file object."""
        return Call(
            "GET",
            sandbox_path(sandbox_id, "files", "archive"),
            Downloaded.from_received,
            params={"path": path, "format": format},
            download=Download(target, progress),
        )

    @endpoint
    def upload_archive(
        self,
        sandbox_id: str,
        path: str,
        source: Source,
        *,
        format: str = "tar.gz",
        holder: str | None = None,
        epoch: int | None = None,
        progress: Progress | None = None,
    ) -> Call[Extracted]:
        """Extract a tar, tar.gz or zip (a local path, a file object or bytes) into a
        directory of the sandbox; a refused entry raises `BadRequest` naming it."""
        upload = Upload(source, progress)
        params = compact({"path": path, "format": format, "holder": holder, "epoch": epoch})
        return Call(
            "PUT",
            sandbox_path(sandbox_id, "files", "archive"),
            parser(Extracted),
            params=params,
            upload=upload,
        )

    @endpoint
    def create_link(
        self,
        sandbox_id: str,
        path: str,
        *,
        method: str = "GET",
        expires_in_seconds: int | None = None,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[FileLink]:
        """A URL that downloads (GET) or uploads (PUT) one file without the token, until it
        expires: for handing a file, or a place to put one, to a chat's user."""
        body = compact(
            {
                "path": path,
                "method": method,
                "expires_in_seconds": expires_in_seconds,
                "holder": holder,
                "epoch": epoch,
            }
        )
        return Call("POST", sandbox_path(sandbox_id, "files", "links"), parser(FileLink), json=body)

    @endpoint
    def download_exec_output(
        self,
        sandbox_id: str,
        exec_id: str,
        target: Target,
        *,
        stream: str = "stdout",
        progress: Progress | None = None,
    ) -> Call[Downloaded]:
        """All of an exec's stdout (or stderr) that the sandbox keeps, far beyond what an
        answer carries, streamed into a local path or a file object."""
        return Call(
            "GET",
            exec_path(sandbox_id, exec_id, "output", "raw"),
            Downloaded.from_received,
            params={"stream": stream},
            download=Download(target, progress),
        )
