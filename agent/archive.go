package main

// Directory archives, both ways, as the sandbox user: `archive` writes a directory under
// /workspace to stdout as tar, tar.gz or zip; `extract` (extract.go) reads one from stdin into
// a directory. Both run inside the sandbox, so a hostile archive is parsed within the sandbox's
// own CPU, memory and disk limits, never in Boxyard's process.

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"compress/flate"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// archive: boxyard-agent archive PATH tar|tar.gz|zip
func archive(args []string) int {
	if len(args) != 2 || !knownFormat(args[1]) {
		fmt.Fprintln(os.Stderr, "usage: boxyard-agent archive PATH tar|tar.gz|zip")
		return 2
	}
	root, code := workspaceDir(args[0])
	if code != 0 {
		return code
	}
	out := bufio.NewWriterSize(os.Stdout, 256<<10)
	var err error
	switch args[1] {
	case "zip":
		err = writeZip(out, root)
	case "tar.gz":
		var zipped *gzip.Writer
		zipped, err = gzip.NewWriterLevel(out, gzip.BestSpeed)
		if err == nil {
			err = writeTar(zipped, root)
			if closeErr := zipped.Close(); err == nil {
				err = closeErr
			}
		}
	default:
		err = writeTar(out, root)
	}
	if flushErr := out.Flush(); err == nil {
		err = flushErr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "boxyard: %v\n", err)
		return 1
	}
	return 0
}

func knownFormat(format string) bool {
	return format == "tar" || format == "tar.gz" || format == "zip"
}

// workspaceDir resolves a directory that must lie under /workspace, with the file scripts'
// verdicts when it does not.
func workspaceDir(path string) (string, int) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", verdictNotFound
	}
	if real != "/workspace" && !strings.HasPrefix(real, "/workspace/") {
		return "", verdictOutside
	}
	if info, err := os.Stat(real); err != nil || !info.IsDir() {
		return "", verdictNotDirectory
	}
	return real, 0
}

// entries walks a directory (never following a symlink), giving each entry's name relative
// to it with "/" separators; what cannot be read is said on stderr and left out.
func entries(root string, each func(name, path string, info fs.FileInfo) error) error {
	return filepath.WalkDir(root, func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(os.Stderr, "boxyard: left out %s: %v\n", path, err)
			if entry != nil && entry.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if path == root {
			return nil
		}
		info, err := entry.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		name, _ := filepath.Rel(root, path)
		return each(filepath.ToSlash(name), path, info)
	})
}

// archived says whether an entry goes into an archive (directories, files and symlinks do;
// devices, pipes and sockets have no place in an archive of files) and a symlink's target.
func archived(path string, info fs.FileInfo) (string, bool) {
	if info.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(path)
		return target, err == nil
	}
	return "", info.IsDir() || info.Mode().IsRegular()
}

func writeTar(w io.Writer, root string) error {
	archive := tar.NewWriter(w)
	err := entries(root, func(name, path string, info fs.FileInfo) error {
		link, keep := archived(path, info)
		if !keep {
			return nil
		}
		header, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		header.Name = name
		if info.IsDir() {
			header.Name += "/"
		}
		header.Uname, header.Gname = "", ""
		header.Format = tar.FormatPAX
		if !info.Mode().IsRegular() {
			return archive.WriteHeader(header)
		}
		file, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "boxyard: left out %s: %v\n", path, err)
			return nil
		}
		defer file.Close()
		if err := archive.WriteHeader(header); err != nil {
			return err
		}
		// A file that grew since it was looked at is cut at the size in its header; one that
		// shrank fails the archive (its header promised more).
		_, err = io.CopyN(archive, file, header.Size)
		return err
	})
	if err != nil {
		return err
	}
	return archive.Close()
}

func writeZip(w io.Writer, root string) error {
	archive := zip.NewWriter(w)
	archive.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(out, flate.BestSpeed)
	})
	err := entries(root, func(name, path string, info fs.FileInfo) error {
		link, keep := archived(path, info)
		if !keep {
			return nil
		}
		header, err := zip.FileInfoHeader(info)
		if err != nil {
			return err
		}
		header.Name = name
		if info.IsDir() {
			header.Name += "/"
			_, err = archive.CreateHeader(header)
			return err
		}
		header.Method = zip.Deflate
		if link != "" {
			header.Method = zip.Store
			entry, err := archive.CreateHeader(header)
			if err == nil {
				_, err = io.WriteString(entry, link)
			}
			return err
		}
		file, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "boxyard: left out %s: %v\n", path, err)
			return nil
		}
		defer file.Close()
		entry, err := archive.CreateHeader(header)
		if err != nil {
			return err
		}
		_, err = io.Copy(entry, file)
		return err
	})
	if err != nil {
		return err
	}
	return archive.Close()
}
