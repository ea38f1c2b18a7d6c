package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The file scripts' verdicts (sandboxes/scripts.py), shared by list.
const (
	verdictNotFound     = 202
	verdictOutside      = 203
	verdictNotDirectory = 208
)

var errEnough = errors.New("enough entries")

type listEntry struct {
	Path    string `json:"path,omitempty"`
	PathB64 []byte `json:"path_b64,omitempty"` // a name that is not UTF-8, byte for byte
	Type    string `json:"type"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode"`
	Mtime   int64  `json:"mtime"`
}

// list writes a directory's entries under /workspace as one JSON object per line: a name
// may hold any byte but NUL and "/", and JSON escapes every one of them, so no name can pose
// as another entry. It runs as the sandbox user and never follows a symlink below the
// directory; the directory itself must resolve inside /workspace.
func list(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: boxyard-agent list PATH 0|1 MAX")
		return 2
	}
	recursive := args[1] == "1"
	most, err := strconv.Atoi(args[2])
	if err != nil || most < 0 {
		fmt.Fprintln(os.Stderr, "boxyard: bad MAX")
		return 2
	}
	real, err := filepath.EvalSymlinks(args[0])
	if err != nil {
		return verdictNotFound
	}
	if real != "/workspace" && !strings.HasPrefix(real, "/workspace/") {
		return verdictOutside
	}
	if info, err := os.Stat(real); err != nil || !info.IsDir() {
		return verdictNotDirectory
	}
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	defer out.Flush()
	encoder := json.NewEncoder(out)
	count := 0
	// emit writes an entry and says whether to go on (one more than asked tells the caller
	// the list was cut).
	emit := func(path string, info fs.FileInfo) bool {
		count++
		return encoder.Encode(entryOf(path, info)) == nil && count <= most
	}
	if !recursive {
		names, err := os.ReadDir(real)
		if err != nil {
			fmt.Fprintf(os.Stderr, "boxyard: %v\n", err)
			return 1
		}
		for _, name := range names {
			path := filepath.Join(real, name.Name())
			if info, err := os.Lstat(path); err == nil && !emit(path, info) {
				break
			}
		}
		return 0
	}
	filepath.WalkDir(real, func(path string, entry fs.DirEntry, err error) error {
		if path == real {
			return nil
		}
		if err != nil {
			return nil // unreadable: left out, as find leaves it out
		}
		info, err := entry.Info()
		if err != nil {
			return nil
		}
		if !emit(path, info) {
			return errEnough
		}
		return nil
	})
	return 0
}

func entryOf(path string, info fs.FileInfo) listEntry {
	kind := "other"
	switch mode := info.Mode(); {
	case mode.IsRegular():
		kind = "file"
	case mode.IsDir():
		kind = "dir"
	case mode&fs.ModeSymlink != 0:
		kind = "symlink"
	}
	permissions := uint32(info.Mode().Perm())
	if info.Mode()&fs.ModeSetuid != 0 {
		permissions |= 0o4000
	}
	if info.Mode()&fs.ModeSetgid != 0 {
		permissions |= 0o2000
	}
	if info.Mode()&fs.ModeSticky != 0 {
		permissions |= 0o1000
	}
	entry := listEntry{Type: kind, Size: info.Size(), Mode: fmt.Sprintf("%04o", permissions), Mtime: info.ModTime().Unix()}
	if utf8.ValidString(path) {
		entry.Path = path
	} else {
		entry.PathB64 = []byte(path)
	}
	return entry
}
