package main

// extract: boxyard-agent extract PATH tar|tar.gz|zip MAX_ENTRIES MAX_BYTES
//
// Reads an archive from stdin into the directory PATH under /workspace, as the sandbox user.
// Everything is first extracted into a new directory beside the entries it will join
// (PATH/.boxyard-extract.PID), checked, and only then moved into place; a refused archive
// leaves nothing behind (not even PATH and its parents, when the extraction made them).
// Refused, naming the entry: an absolute name or one with ".." (in a zip, "\" separates too),
// a symlink whose target leaves PATH (or that points at another of the archive's symlinks on
// its way), a hardlink to anything but a file the archive made before, devices, FIFOs, a name
// met twice, more than MAX_ENTRIES entries or MAX_BYTES bytes expanded, an entry that would
// put a file where PATH has a directory (or the reverse). Refused as "(archive)": a tar that
// ends without its end-of-archive blocks, or with anything but zeros after them, a gzip
// stream without its trailer or with a wrong CRC or length, or followed by anything but
// another gzip stream, a zip followed by anything; the archive is read to its end to check.
// A full disk is said as "No space left on device".

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const verdictRefused = 213

// refusal is an entry the archive may not have: said on stdout as JSON, exit 213.
type refusal struct {
	Entry  string `json:"entry"`
	Reason string `json:"reason"`
}

func (r *refusal) Error() string { return r.Entry + ": " + r.Reason }

type extraction struct {
	stage    string // the directory entries are made in
	maxCount int
	maxBytes int64
	count    int
	bytes    int64
	made     map[string]fs.FileMode // each entry made, by its clean name: its type
}

func extract(args []string) int {
	if len(args) != 4 || !knownFormat(args[1]) {
		fmt.Fprintln(os.Stderr, "usage: boxyard-agent extract PATH tar|tar.gz|zip MAX_ENTRIES MAX_BYTES")
		return 2
	}
	maxCount, err1 := strconv.Atoi(args[2])
	maxBytes, err2 := strconv.ParseInt(args[3], 10, 64)
	if err1 != nil || err2 != nil || maxCount < 0 || maxBytes < 0 {
		fmt.Fprintln(os.Stderr, "boxyard: bad limits")
		return 2
	}
	if !strings.HasPrefix(args[0]+"/", "/workspace/") {
		return verdictOutside
	}
	// The directories to make are made inside /workspace only (makeWorkspaceDir); a refused
	// archive takes them away again, and only them.
	root, made, code, err := makeWorkspaceDir(args[0])
	if err == nil && code == 0 {
		err = extractInto(root, args[1], os.Stdin, maxCount, maxBytes)
	}
	if err != nil || code != 0 {
		unmake(made)
	}
	if err != nil {
		return extractFailed(err)
	}
	return code
}

// extractInto extracts the archive read from `in` into the directory root (see the top).
func extractInto(root, format string, in io.Reader, maxCount int, maxBytes int64) error {
	stage := filepath.Join(root, fmt.Sprintf(".boxyard-extract.%d", os.Getpid()))
	if err := os.Mkdir(stage, 0o700); err != nil {
		return err
	}
	x := &extraction{stage: stage, maxCount: maxCount, maxBytes: maxBytes, made: map[string]fs.FileMode{}}
	err := x.read(format, in)
	if err == nil {
		err = x.checkLinks()
	}
	if err == nil {
		err = x.checkPlaces(root)
	}
	if err == nil {
		err = x.moveInto(root)
	}
	os.RemoveAll(stage)
	if err == nil {
		json.NewEncoder(os.Stdout).Encode(map[string]int64{"entries": int64(x.count), "bytes": x.bytes})
	}
	return err
}

// unmake removes the directories an extraction made, the deepest first, while they are
// empty (something else may have put an entry in one meanwhile: it stays).
func unmake(made []string) {
	for i := len(made) - 1; i >= 0; i-- {
		if os.Remove(made[i]) != nil {
			return
		}
	}
}

func extractFailed(err error) int {
	var refused *refusal
	if errors.As(err, &refused) {
		json.NewEncoder(os.Stdout).Encode(refused)
		return verdictRefused
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		fmt.Fprintln(os.Stderr, "boxyard: No space left on device")
		return 1
	}
	fmt.Fprintf(os.Stderr, "boxyard: %v\n", err)
	return 1
}

func (x *extraction) read(format string, in io.Reader) error {
	switch format {
	case "zip":
		return x.readZip(in)
	case "tar.gz":
		// A ByteReader, so that the gzip reader reads no further than its stream: what
		// follows is left here to be looked at.
		buffered := bufio.NewReader(in)
		unzipped, err := gzip.NewReader(buffered)
		if err != nil {
			return &refusal{"(archive)", "not a gzip stream: " + err.Error()}
		}
		unzipped.Multistream(false)
		return x.readTar(&gzipStream{buffered, unzipped})
	default:
		return x.readTar(in)
	}
}

func (x *extraction) readTar(in io.Reader) error {
	stream := &tarStream{r: in}
	archive := tar.NewReader(stream)
	for {
		header, err := archive.Next()
		if err == io.EOF {
			return x.endTar(stream)
		}
		var refused *refusal
		if errors.As(err, &refused) {
			return err
		}
		if err != nil {
			return &refusal{"(archive)", "truncated or not a tar archive: " + err.Error()}
		}
		var kind fs.FileMode
		switch header.Typeflag {
		case tar.TypeDir:
			kind = fs.ModeDir
		case tar.TypeReg, tar.TypeRegA:
			kind = 0
		case tar.TypeSymlink:
			kind = fs.ModeSymlink
		case tar.TypeLink:
			kind = fs.ModeIrregular // a hardlink, below
		case tar.TypeXGlobalHeader:
			continue
		case tar.TypeChar, tar.TypeBlock:
			return &refusal{header.Name, "is a device file"}
		case tar.TypeFifo:
			return &refusal{header.Name, "is a FIFO"}
		default:
			return &refusal{header.Name, fmt.Sprintf("has a type this server does not extract (%q)", header.Typeflag)}
		}
		if err := x.entry(header.Name, kind, header.Linkname, header.FileInfo().Mode().Perm(), header.ModTime, archive); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return &refusal{header.Name, "is truncated"}
			}
			return err
		}
	}
}

func (x *extraction) readZip(in io.Reader) error {
	// A zip's directory is at its end: the archive is kept in the stage first (it counts
	// against the workspace like any file), then read from there.
	kept := filepath.Join(x.stage, ".archive.zip")
	file, err := os.OpenFile(kept, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		file.Close()
		os.Remove(kept)
	}()
	size, err := io.Copy(file, in)
	if err != nil {
		return err
	}
	archive, err := zip.NewReader(file, size)
	if err != nil {
		return &refusal{"(archive)", "truncated or not a zip archive: " + err.Error()}
	}
	if err := zipEnd(file, size, archive.Comment); err != nil {
		return err
	}
	for _, entry := range archive.File {
		mode := entry.Mode()
		var kind fs.FileMode
		switch {
		case mode.IsDir() || strings.HasSuffix(entry.Name, "/") || strings.HasSuffix(entry.Name, `\`):
			kind = fs.ModeDir
		case mode&fs.ModeSymlink != 0:
			kind = fs.ModeSymlink
		case mode.IsRegular():
			kind = 0
		case mode&fs.ModeDevice != 0:
			return &refusal{entry.Name, "is a device file"}
		case mode&fs.ModeNamedPipe != 0:
			return &refusal{entry.Name, "is a FIFO"}
		default:
			return &refusal{entry.Name, "has a type this server does not extract"}
		}
		if err := x.zipEntry(entry, kind); err != nil {
			return err
		}
	}
	return nil
}

func (x *extraction) zipEntry(entry *zip.File, kind fs.FileMode) error {
	body, err := entry.Open()
	if err != nil {
		return &refusal{entry.Name, "cannot be read: " + err.Error()}
	}
	defer body.Close()
	link := ""
	if kind == fs.ModeSymlink {
		target, err := io.ReadAll(io.LimitReader(body, 4096))
		if err != nil {
			return &refusal{entry.Name, "is truncated"}
		}
		link = string(target)
	}
	// A zip's names are said with "/" only, but some makers write "\" (a Windows path):
	// taken as "/", so that "..\..\x" climbs out, and is refused, like any other.
	name := strings.ReplaceAll(entry.Name, `\`, "/")
	if _, reason := cleanName(name); reason != "" {
		return &refusal{entry.Name, reason}
	}
	err = x.entry(name, kind, link, entry.Mode().Perm(), entry.Modified, body)
	if err != nil && (errors.Is(err, zip.ErrChecksum) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, zip.ErrFormat)) {
		return &refusal{entry.Name, "is truncated or corrupt"}
	}
	return err
}

// entry makes one entry in the stage after checking its name, its kind and the limits.
func (x *extraction) entry(name string, kind fs.FileMode, link string, perm fs.FileMode, modified time.Time, body io.Reader) error {
	clean, reason := cleanName(name)
	if reason != "" {
		return &refusal{name, reason}
	}
	x.count++
	if x.count > x.maxCount {
		return &refusal{name, fmt.Sprintf("is past the %d entries an archive may have", x.maxCount)}
	}
	if clean == "." {
		return nil // the root itself
	}
	if earlier, seen := x.made[clean]; seen {
		if earlier == fs.ModeDir && kind == fs.ModeDir {
			return nil
		}
		return &refusal{name, "appears twice in the archive"}
	}
	// Never through a symlink the archive made: every parent must be a directory it made
	// (or one made for it here).
	if err := x.parents(name, clean); err != nil {
		return err
	}
	target := filepath.Join(x.stage, filepath.FromSlash(clean))
	switch kind {
	case fs.ModeDir:
		if err := os.Mkdir(target, 0o755|perm&0o777); err != nil {
			return err
		}
	case fs.ModeSymlink:
		if err := symlinkInside(name, clean, link); err != nil {
			return err
		}
		if err := os.Symlink(link, target); err != nil {
			return err
		}
	case fs.ModeIrregular: // a hardlink to a file made before
		source, reason := cleanName(link)
		if madeKind, seen := x.made[source]; reason != "" || !seen || madeKind != 0 {
			return &refusal{name, fmt.Sprintf("links to %q, which is not a file of the archive", link)}
		}
		if err := os.Link(filepath.Join(x.stage, filepath.FromSlash(source)), target); err != nil {
			return err
		}
		kind = 0
	default:
		file, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644|perm&0o755)
		if err != nil {
			return err
		}
		room := x.maxBytes - x.bytes
		written, err := io.Copy(file, io.LimitReader(body, room+1))
		x.bytes += written
		closeErr := file.Close()
		if err != nil {
			return err
		}
		if closeErr != nil {
			return closeErr
		}
		if written > room {
			return &refusal{name, fmt.Sprintf("expands past the %d bytes an archive may hold", x.maxBytes)}
		}
		if !modified.IsZero() {
			os.Chtimes(target, modified, modified)
		}
	}
	x.made[clean] = kind
	return nil
}

// parents makes the directories above an entry that the archive did not list, and refuses an
// entry below anything but a directory.
func (x *extraction) parents(name, clean string) error {
	dir := path.Dir(clean)
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		above := strings.Join(parts[:i+1], "/")
		kind, seen := x.made[above]
		if !seen {
			if err := os.Mkdir(filepath.Join(x.stage, filepath.FromSlash(above)), 0o755); err != nil {
				return err
			}
			x.made[above] = fs.ModeDir
			continue
		}
		if kind != fs.ModeDir {
			return &refusal{name, fmt.Sprintf("is below %q, which is not a directory", above)}
		}
	}
	return nil
}

// cleanName is an entry's name relative to the archive's root, or why it cannot be one.
func cleanName(name string) (string, string) {
	if name == "" {
		return "", "has no name"
	}
	if strings.ContainsRune(name, 0) {
		return "", "has a NUL in its name"
	}
	if strings.HasPrefix(name, "/") {
		return "", "has an absolute name"
	}
	for _, part := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		if part == ".." {
			return "", "climbs out with \"..\""
		}
	}
	return path.Clean(name), ""
}

// symlinkInside refuses a link whose target, read from where the link is, leaves the root.
func symlinkInside(name, clean, link string) error {
	if link == "" {
		return &refusal{name, "is a symlink to nothing"}
	}
	if strings.HasPrefix(link, "/") {
		return &refusal{name, fmt.Sprintf("is a symlink to the absolute path %q", link)}
	}
	resolved := path.Join(path.Dir(clean), link)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return &refusal{name, fmt.Sprintf("is a symlink to %q, outside the directory", link)}
	}
	return nil
}

// checkLinks resolves every symlink the archive made, through the others, and refuses one
// that ends outside the stage: a link may be lexically inside yet climb out through another
// link ("a -> .", "b -> a/..").
func (x *extraction) checkLinks() error {
	for name, kind := range x.made {
		if kind != fs.ModeSymlink {
			continue
		}
		real, err := filepath.EvalSymlinks(filepath.Join(x.stage, filepath.FromSlash(name)))
		if err != nil {
			continue // dangling: it was inside when read, and points at nothing yet
		}
		if real != x.stage && !strings.HasPrefix(real, x.stage+"/") {
			return &refusal{name, "is a symlink that leads outside the directory through another link"}
		}
	}
	return nil
}

// checkPlaces refuses to put a file where the directory has a directory, or the reverse;
// what moves in replaces files and links of the same name.
func (x *extraction) checkPlaces(root string) error {
	for name, kind := range x.made {
		info, err := os.Lstat(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			continue
		}
		if info.IsDir() != (kind == fs.ModeDir) {
			what := "a file"
			if info.IsDir() {
				what = "a directory"
			}
			return &refusal{name, fmt.Sprintf("would replace %s of the same name", what)}
		}
	}
	return nil
}

// moveInto renames each top-level entry of the stage into the root, merging directories that
// exist already.
func (x *extraction) moveInto(root string) error {
	return merge(x.stage, root)
}

func merge(from, into string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, entry := range entries {
		source := filepath.Join(from, entry.Name())
		target := filepath.Join(into, entry.Name())
		if entry.IsDir() {
			if info, err := os.Lstat(target); err == nil && info.IsDir() {
				if err := merge(source, target); err != nil {
					return err
				}
				continue
			}
		}
		if err := os.Rename(source, target); err != nil {
			return err
		}
	}
	return nil
}
