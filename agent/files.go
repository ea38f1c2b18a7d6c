package main

// Files as byte streams, as the sandbox user: `put` writes a file from stdin, `get` writes a
// file (or a byte range of it) to stdout. The daemon starts them on a connection of its own
// socket handed over whole (see serveFile), so the bytes go between Boxyard and the file
// with no engine in between; they speak the same verdicts as the file scripts of Boxyard.
//
//	put PATH MODE OVERWRITE SIZE
//	    answers {"ready":true} once the file may be written (or a failure), then reads
//	    exactly SIZE bytes, writes them beside PATH and renames them over it, and answers
//	    {"ok":true}. Input that ends early, or a full disk, leaves nothing behind.
//	get PATH START LENGTH [IDENTITY]
//	    answers {"ok":true,"size","mtime","inode","length"} (or a failure), then exactly
//	    "length" bytes from START (LENGTH -1: to the end). Given an IDENTITY ("size mtime
//	    inode"), a file that no longer has it is refused (it was replaced or written to).
//
// A failure is {"ok":false,"verdict":N,"error":"..."}, N the scripts' exit code for it.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const (
	verdictWriteFailed = 204
	verdictNotRegular  = 205
	verdictExists      = 206
	verdictIsDirectory = 207
	verdictIncomplete  = 211
	verdictChanged     = 212
	// The piece a transfer moves per system call: large enough that the calls cost little,
	// small enough to stay well inside the sandbox's memory.
	transferChunk = 1 << 20
)

func answerLine(out io.Writer, fields map[string]any) {
	line, _ := json.Marshal(fields)
	out.Write(append(line, '\n'))
}

func refuse(out io.Writer, verdict int, message string) int {
	answerLine(out, map[string]any{"ok": false, "verdict": verdict, "error": message})
	return verdict
}

// put: boxyard-agent put PATH MODE OVERWRITE SIZE
func put(args []string) int {
	out := os.Stdout
	if len(args) != 4 {
		return refuse(out, 2, "usage: boxyard-agent put PATH MODE OVERWRITE SIZE")
	}
	mode, err1 := strconv.ParseUint(args[1], 8, 32)
	size, err2 := strconv.ParseInt(args[3], 10, 64)
	if err1 != nil || err2 != nil || size < 0 || mode > 0o7777 {
		return refuse(out, 2, "bad mode or size")
	}
	overwrite := args[2] == "1"
	target := args[0]
	if !strings.HasPrefix(target, "/workspace/") {
		return refuse(out, verdictOutside, target+" is outside /workspace")
	}
	dir, name := filepath.Split(target)
	real, _, code, err := makeWorkspaceDir(filepath.Clean(dir))
	if errors.Is(err, syscall.ENOTDIR) {
		return refuse(out, verdictNotDirectory, "a parent of "+target+" is not a directory")
	}
	if err != nil {
		return refuse(out, verdictWriteFailed, errorText(err))
	}
	if code != 0 {
		return refuse(out, code, "cannot make "+dir)
	}
	// Names relative to the directory from here on: the temporary file's absolute path may be
	// longer than the kernel's PATH_MAX even when the target's is not.
	if err := os.Chdir(real); err != nil {
		return refuse(out, verdictWriteFailed, errorText(err))
	}
	placed := filepath.Join(real, name)
	if info, err := os.Lstat(name); err == nil {
		if info.IsDir() {
			return refuse(out, verdictIsDirectory, placed+" is a directory")
		}
		if !overwrite {
			return refuse(out, verdictExists, placed+" exists")
		}
	}
	temp := fmt.Sprintf(".boxyard-write.%d", os.Getpid())
	file, err := os.OpenFile(temp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return refuse(out, verdictWriteFailed, errorText(err))
	}
	answerLine(out, map[string]any{"ready": true})
	// (Wrapped, so that the copy goes through the buffer instead of the file's ReadFrom, which
	// would copy 32 KiB at a time.)
	written, err := io.CopyBuffer(struct{ io.Writer }{file}, io.LimitReader(os.Stdin, size), make([]byte, transferChunk))
	if closeErr := file.Close(); err == nil {
		err = closeErr
	}
	if err == nil && written < size {
		os.Remove(temp)
		return refuse(out, verdictIncomplete, fmt.Sprintf("the input ended after %d of %d bytes", written, size))
	}
	if err == nil {
		err = os.Chmod(temp, os.FileMode(mode)&os.ModePerm|unixModeBits(mode))
	}
	if err == nil {
		err = place(temp, name, overwrite)
	}
	if err != nil {
		os.Remove(temp)
		if errors.Is(err, os.ErrExist) {
			return refuse(out, verdictExists, placed+" exists")
		}
		return refuse(out, verdictWriteFailed, errorText(err))
	}
	answerLine(out, map[string]any{"ok": true})
	return 0
}

// unixModeBits are the setuid, setgid and sticky bits of an octal mode, as Go's file modes.
func unixModeBits(mode uint64) os.FileMode {
	var bits os.FileMode
	if mode&0o4000 != 0 {
		bits |= os.ModeSetuid
	}
	if mode&0o2000 != 0 {
		bits |= os.ModeSetgid
	}
	if mode&0o1000 != 0 {
		bits |= os.ModeSticky
	}
	return bits
}

// place renames the written file over its target, or (without overwrite) links it there,
// which fails if a file got there meanwhile.
func place(temp, target string, overwrite bool) error {
	if overwrite {
		return os.Rename(temp, target)
	}
	if err := os.Link(temp, target); err != nil {
		return err
	}
	return os.Remove(temp)
}

// makeWorkspaceDir makes a directory under /workspace with its parents, making nothing
// outside: the deepest part that exists is resolved first (a symlink on the way may lead
// elsewhere). It answers the directory resolved and the directories it made (the highest
// first), or a verdict, or the error that stopped the making (a full disk, a file on the way).
func makeWorkspaceDir(dir string) (string, []string, int, error) {
	existing := dir
	var missing []string
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		missing = append(missing, existing)
		existing = filepath.Dir(existing)
	}
	if _, code := workspaceDir(existing); code != 0 {
		return "", nil, code, nil
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		err := os.Mkdir(missing[i], 0o755)
		if err == nil {
			made = append(made, missing[i])
		} else if !errors.Is(err, os.ErrExist) { // made meanwhile by someone else: not ours
			return "", made, 0, err
		}
	}
	real, code := workspaceDir(dir)
	return real, made, code, nil
}

// get: boxyard-agent get PATH START LENGTH [IDENTITY]
func get(args []string) int {
	out := bufio.NewWriterSize(os.Stdout, 4096)
	defer out.Flush()
	if len(args) != 3 && len(args) != 4 {
		return refuse(out, 2, "usage: boxyard-agent get PATH START LENGTH [IDENTITY]")
	}
	start, err1 := strconv.ParseInt(args[1], 10, 64)
	length, err2 := strconv.ParseInt(args[2], 10, 64)
	if err1 != nil || err2 != nil || start < 0 {
		return refuse(out, 2, "bad start or length")
	}
	if _, err := os.Lstat(args[0]); err != nil {
		return refuse(out, verdictNotFound, args[0]+" does not exist")
	}
	real, err := filepath.EvalSymlinks(args[0])
	if err != nil {
		return refuse(out, verdictNotFound, args[0]+" does not exist")
	}
	if real != "/workspace" && !strings.HasPrefix(real, "/workspace/") {
		return refuse(out, verdictOutside, args[0]+" resolves outside /workspace")
	}
	// Opened without blocking (a FIFO would wait for a writer), then looked at: what is read
	// is the very file looked at.
	file, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return refuse(out, verdictNotFound, errorText(err))
	}
	defer file.Close()
	var stat syscall.Stat_t
	if err := syscall.Fstat(int(file.Fd()), &stat); err != nil {
		return refuse(out, verdictNotFound, errorText(err))
	}
	if stat.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return refuse(out, verdictIsDirectory, real+" is a directory")
	}
	if stat.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return refuse(out, verdictNotRegular, real+" is not a regular file")
	}
	identity := fmt.Sprintf("%d %d %d", stat.Size, stat.Mtim.Sec, stat.Ino)
	if len(args) == 4 && args[3] != identity {
		return refuse(out, verdictChanged, real+" changed since it was looked at")
	}
	left := stat.Size - start
	if left < 0 {
		left = 0
	}
	if length < 0 || length > left {
		length = left
	}
	answerLine(out, map[string]any{
		"ok": true, "size": stat.Size, "mtime": stat.Mtim.Sec, "inode": stat.Ino, "length": length,
	})
	if err := out.Flush(); err != nil {
		return verdictWriteFailed
	}
	// Fewer bytes than promised (the file shrank meanwhile) end the stream early, which the
	// reader sees as a read cut short.
	if sent := sendFile(file, start, length); sent < length {
		return verdictChanged
	}
	return 0
}

// sendFile writes length bytes of file from start to stdout, by the kernel (sendfile) where
// it can, and answers how many were written.
func sendFile(file *os.File, start, length int64) int64 {
	out := int(os.Stdout.Fd())
	offset, sent := start, int64(0)
	for sent < length {
		n, err := syscall.Sendfile(out, int(file.Fd()), &offset, int(minInt64(length-sent, transferChunk)))
		if n > 0 {
			sent += int64(n)
		}
		if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) {
			continue
		}
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) {
			copied, _ := io.CopyBuffer(struct{ io.Writer }{os.Stdout}, io.NewSectionReader(file, offset, length-sent), make([]byte, transferChunk))
			return sent + copied
		}
		if err != nil || n == 0 {
			return sent
		}
	}
	return sent
}

func minInt64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

// serveFile hands a connection whose first request is {"op":"file","argv":["put"|"get",...]}
// to that program, started as the sandbox user with the connection as its stdin and stdout:
// the file's bytes then go between the connection and the file with nothing in between.
// The client sends nothing more until the program has answered its first line.
func serveFile(sock *net.UnixConn, reader *bufio.Reader, req *request) {
	defer sock.Close()
	if reader.Buffered() > 0 {
		answerLine(sock, map[string]any{"ok": false, "code": "bad_request", "error": "a file request is sent alone, then its answer awaited"})
		return
	}
	if len(req.Argv) == 0 || (req.Argv[0] != "put" && req.Argv[0] != "get") {
		answerLine(sock, map[string]any{"ok": false, "code": "bad_request", "error": "a file request is put or get"})
		return
	}
	self, err := os.Executable()
	var quiet *os.File
	if err == nil {
		quiet, err = os.Open(os.DevNull)
	}
	if err == nil {
		defer quiet.Close()
		var conn *os.File
		if conn, err = sock.File(); err == nil {
			var proc *os.Process
			proc, err = startForSandbox(self, append([]string{"boxyard-agent"}, req.Argv...), &os.ProcAttr{
				Dir:   "/workspace",
				Env:   []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
				Files: []*os.File{conn, conn, quiet},
				Sys:   asSandbox(newTag()),
			})
			conn.Close()
			if err == nil {
				waitPid(proc.Pid)
				return
			}
		}
	}
	answerLine(sock, map[string]any{"ok": false, "code": "internal", "error": "cannot start " + req.Argv[0] + ": " + errorText(err)})
}
