package main

// Spawning: starting a command as the sandbox user, waiting for it, reading its pipes into
// its exec, and finding its program on PATH.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

const readChunk = 32 << 10

// spawn starts a program in its own process group, its stdout and stderr read into the exec.
// It returns when the program has started; wait() gives its exit status.
type spawned struct {
	proc    *os.Process
	readers sync.WaitGroup
	pipes   []*os.File
}

func spawn(e *Exec, argv []string, dir string, env []string, withStdin bool) (*spawned, error) {
	path, err := lookPathAsSandbox(argv[0], env, dir)
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	var stdinR, stdinW *os.File
	if withStdin {
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return nil, err
		}
	} else if stdinR, err = os.Open(os.DevNull); err != nil {
		return nil, err
	}
	tag := newTag()
	proc, err := startForSandbox(path, argv, &os.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []*os.File{stdinR, outW, errW},
		Sys:   asSandbox(tag),
	})
	stdinR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		return nil, err
	}
	s := &spawned{proc: proc, pipes: []*os.File{outR, errR}}
	s.readers.Add(2)
	go readInto(e, "stdout", outR, &s.readers)
	go readInto(e, "stderr", errR, &s.readers)
	e.mu.Lock()
	e.pid = proc.Pid
	e.tag, e.ownsTag = tag, true
	e.killer = func(sig syscall.Signal) { killTag(tag, sig) }
	if withStdin {
		e.stdin = stdinW
		e.stdinQueue = make(chan stdinWrite, 256)
		go e.stdinLoop()
	}
	e.mu.Unlock()
	return s, nil
}

// wait waits for the program to exit and for its output to be read. Output still held open by
// a child that outlived it is read for a short grace period, then left behind.
func (s *spawned) wait(e *Exec, grace time.Duration) (int, error) {
	status := waitPid(s.proc.Pid)
	drained := make(chan struct{})
	go func() { s.readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(grace):
		for _, pipe := range s.pipes {
			pipe.SetReadDeadline(time.Now())
		}
		<-drained
		for i, pipe := range s.pipes {
			drainNow(e, []string{"stdout", "stderr"}[i], pipe)
		}
	}
	for _, pipe := range s.pipes {
		pipe.Close()
	}
	e.mu.Lock()
	if e.stdinQueue != nil {
		close(e.stdinQueue)
		e.stdinQueue = nil
	}
	e.mu.Unlock()
	return exitStatus(status), nil
}

func exitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// readInto reads a stream into the exec until it ends. A chunk never ends inside a UTF-8
// character: the incomplete tail waits for the next read, so every chunk decodes on its own.
func readInto(e *Exec, stream string, r *os.File, wg *sync.WaitGroup) {
	defer wg.Done()
	buf := make([]byte, readChunk+utf8.UTFMax)
	held := 0
	for {
		n, err := r.Read(buf[held : held+readChunk])
		n += held
		cut := n
		if err == nil {
			cut = n - incompleteTail(buf[:n])
		}
		e.append(stream, buf[:cut])
		held = copy(buf, buf[cut:n])
		if err != nil {
			return
		}
	}
}

// incompleteTail is how many bytes at the end of data begin a UTF-8 character not yet whole.
func incompleteTail(data []byte) int {
	for i := len(data) - 1; i >= 0 && i >= len(data)-utf8.UTFMax; i-- {
		if !utf8.RuneStart(data[i]) {
			continue
		}
		need := 1
		switch {
		case data[i]&0xE0 == 0xC0:
			need = 2
		case data[i]&0xF0 == 0xE0:
			need = 3
		case data[i]&0xF8 == 0xF0:
			need = 4
		}
		if len(data)-i < need {
			return len(data) - i
		}
		return 0
	}
	return 0
}

// drainNow reads what a pipe holds right now without waiting for more. Its callers have just
// stopped the pipe's reader with a read deadline in the past; a deadline that has passed makes
// the runtime refuse every read, this one too, so it is cleared first (the read below never
// waits: the pipe is non-blocking and an empty one ends it).
func drainNow(e *Exec, stream string, f *os.File) {
	f.SetReadDeadline(time.Time{})
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, readChunk)
	raw.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.Read(int(fd), buf)
			if n > 0 {
				e.append(stream, buf[:n])
			}
			if err != nil || n <= 0 {
				return true
			}
		}
	})
}

// lookPathAsSandbox finds a program as the sandbox user would: a directory or a program
// the sandbox user cannot reach is not found.
func lookPathAsSandbox(name string, env []string, dir string) (path string, err error) {
	checkAsSandbox(func() { path, err = lookPath(name, env, dir) })
	return path, err
}

func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			path = kv[5:]
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		candidate := filepath.Join(d, name)
		if !filepath.IsAbs(candidate) {
			candidate = filepath.Join(dir, candidate)
		}
		if info, err := os.Stat(candidate); err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", fail("not_found", fmt.Sprintf("%s: command not found", name))
}
