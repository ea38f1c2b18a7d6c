"""File operations under /workspace, done inside the sandbox as the sandbox user.

`paths`: checking paths and modes; `contents`: the JSON calls' text and base64; `inside`:
running an operation in the sandbox and reading its verdict; `operations`: write (from bytes
or a stream of any size) and delete; `reading`: a slice, a look, a stream or a byte range;
`listing`: directories; `directories`: making one, moving a file or a directory; `archives`: a directory as tar, tar.gz or zip, and an archive
extracted into one; `links`: signed links to one file.
"""

from sandboxes.services.files.archives import (
    FORMATS,
    Archive,
    ArchiveFormat,
    Extracted,
    extract_archive,
    open_archive,
)
from sandboxes.services.files.contents import decode_contents, decoded_contents
from sandboxes.services.files.directories import make_dir, move_file
from sandboxes.services.files.links import (
    Link,
    LinkMethod,
    UsedLink,
    clean_link,
    create_link,
    link_methods,
    use_link,
)
from sandboxes.services.files.listing import MAX_LIST_ENTRIES, FileEntry, list_files
from sandboxes.services.files.operations import Written, delete_file, write_file
from sandboxes.services.files.paths import NAME_MAX, PATH_MAX, clean_mode, workspace_path
from sandboxes.services.files.reading import (
    FileContent,
    FileInfo,
    FileStream,
    open_file_stream,
    read_file,
    stat_file,
)

__all__ = [
    "FORMATS",
    "MAX_LIST_ENTRIES",
    "NAME_MAX",
    "PATH_MAX",
    "Archive",
    "ArchiveFormat",
    "Extracted",
    "FileContent",
    "FileEntry",
    "FileInfo",
    "FileStream",
    "Link",
    "LinkMethod",
    "UsedLink",
    "Written",
    "clean_link",
    "clean_mode",
    "create_link",
    "decode_contents",
    "decoded_contents",
    "delete_file",
    "extract_archive",
    "link_methods",
    "list_files",
    "make_dir",
    "move_file",
    "open_archive",
    "open_file_stream",
    "read_file",
    "stat_file",
    "use_link",
    "workspace_path",
    "write_file",
]
