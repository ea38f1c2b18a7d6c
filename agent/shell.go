package main

// A session's shell: starting it, and running a command inside it through its script,
// fifos and status pipe.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type shellProc struct {
	proc    *os.Process
	tag     uint32
	stdin   *os.File
	status  chan string
	dead    chan struct{}
	code    int
	retired bool // a command left processes in its tag: the next command gets a new shell
}

// The shell's side of the protocol. __BY is the session's directory; fd 9 the status pipe.
const shellInit = `__by_s() {
  pwd >"$__BY/cwd" 2>/dev/null || :
  export -p >"$__BY/env" 2>/dev/null || :
  if [ -n "${BASH_VERSION:-}" ]; then declare -f >"$__BY/fn" 2>/dev/null || :; fi
  printf '%s %s\n' "$1" "$2" >&9 || :
}
`

func (s *Session) startShell() error {
	cwd, env := s.current()
	if !isDirAsSandbox(cwd) {
		cwd = "/"
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	argv := []string{s.agent.shellName}
	if s.agent.shellName == "bash" {
		argv = append(argv, "--norc", "--noprofile")
	}
	// fd 9 is the status pipe: out of the way of the fds scripts use themselves.
	files := []*os.File{stdinR, null, null, nil, nil, nil, nil, nil, nil, statusW}
	tag := newTag()
	proc, err := startForSandbox(s.agent.shellPath, argv, &os.ProcAttr{
		Dir: cwd, Env: env, Files: files,
		Sys: &syscall.SysProcAttr{Setsid: true, Credential: sandboxCredential(tag)},
	})
	stdinR.Close()
	statusW.Close()
	if err != nil {
		stdinW.Close()
		statusR.Close()
		return err
	}
	sh := &shellProc{proc: proc, tag: tag, stdin: stdinW, status: make(chan string, 16), dead: make(chan struct{})}
	go func() {
		scanner := bufio.NewScanner(statusR)
		for scanner.Scan() {
			sh.status <- scanner.Text()
		}
		statusR.Close()
	}()
	go func() {
		sh.code = exitStatus(waitPid(proc.Pid))
		stdinW.Close()
		close(sh.dead)
	}()
	script := "__BY=" + shellQuote(s.dir) + "\n" +
		"[ -f \"$__BY/fn\" ] && . \"$__BY/fn\" >/dev/null 2>&1\n" + shellInit
	if _, err := stdinW.Write([]byte(script)); err != nil {
		return err
	}
	s.mu.Lock()
	s.shell = sh
	s.mu.Unlock()
	return nil
}

// liveShell is the session's shell, a new one if the last has died (restarted is then true)
// or was retired (a planned change of shell: restarted stays false).
func (s *Session) liveShell() (*shellProc, bool, error) {
	s.mu.Lock()
	sh := s.shell
	s.mu.Unlock()
	died := false
	if !sh.retired {
		select {
		case <-sh.dead:
			died = true
		default:
			return sh, false, nil
		}
	}
	if err := s.startShell(); err != nil {
		return nil, died, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shell, died, nil
}

func (s *Session) runInShell(j *job) {
	e, req := j.exec, j.req
	sh, restarted, err := s.liveShell()
	if err != nil {
		e.finish(-1, false, true, "", "cannot start the session's shell: "+err.Error())
		return
	}
	base := filepath.Join(stateDir, "x", e.id)
	script, outPath, errPath := base+".sh", base+".o", base+".e"
	defer os.Remove(script)
	if err := writeReadable(script, []byte(*req.Shell+"\n")); err != nil {
		e.finish(-1, false, restarted, "", err.Error())
		return
	}
	out, err := openFifo(outPath)
	if err != nil {
		e.finish(-1, false, restarted, "", err.Error())
		return
	}
	errPipe, err := openFifo(errPath)
	if err != nil {
		out.Close()
		e.finish(-1, false, restarted, "", err.Error())
		return
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go readInto(e, "stdout", out, &readers)
	go readInto(e, "stderr", errPipe, &readers)

	e.mu.Lock()
	e.pid = sh.proc.Pid
	e.tag = sh.tag // shared with the shell until the command leaves processes behind
	e.killer = func(sig syscall.Signal) { killTag(sh.tag, sig) }
	e.mu.Unlock()

	body := ". " + shellQuote(script)
	if req.Cwd != "" || len(req.Env) > 0 {
		// A per-command cwd or env applies to this command only: run it in a subshell.
		var b strings.Builder
		b.WriteString("(")
		if req.Cwd != "" {
			q := shellQuote(req.Cwd)
			fmt.Fprintf(&b, "cd -- %s 2>/dev/null || { printf 'boxyard: cwd %%s is not a directory\\n' %s >&2; exit 210; }\n", q, q)
		}
		for name, value := range req.Env {
			if validName(name) {
				fmt.Fprintf(&b, "export %s=%s\n", name, shellQuote(value))
			}
		}
		b.WriteString(body + "\n)")
		body = b.String()
	} else {
		body = "{ " + body + "\n}"
	}
	line := fmt.Sprintf("%s </dev/null >%s 2>%s 9>&-; __by_s %s $?\n",
		body, shellQuote(outPath), shellQuote(errPath), e.id)
	timedOut := watchTimeout(e, req.Timeout)
	code, ended := -1, false
	if _, err := sh.stdin.Write([]byte(line)); err != nil {
		ended = true
	}
	for !ended {
		select {
		case status := <-sh.status:
			id, rc, found := strings.Cut(status, " ")
			if found && id == e.id {
				code, _ = strconv.Atoi(rc)
				ended = true
			}
		case <-sh.dead:
			ended = true
		}
	}
	select {
	case <-sh.dead:
		// The command ended the shell (or a timeout or kill did): its status is the shell's.
		code = sh.code
		restarted = true
		s.startShell()
	default:
		// Processes the command left running carry the shell's tag: the tag becomes the
		// command's (so they end at its deadline, or with a kill of it), and the session
		// goes on in a new shell with a tag of its own.
		if len(members(sh.tag, sh.proc.Pid)) > 0 {
			e.mu.Lock()
			e.ownsTag = true
			e.mu.Unlock()
			sh.retired = true
			sh.stdin.Close() // the shell ends at its input's end; its tag stays the command's
		}
	}
	settle(e, []*os.File{out, errPipe}, []string{outPath, errPath}, &readers)
	cwd, _ := s.current()
	e.finish(code, timedOut(), restarted, cwd, "")
}

// openFifo makes a named pipe and opens it for reading and writing, so opening never blocks
// and the pipe never reports an end of its own: the status line says when a command is done.
// The shell, which runs as the sandbox user, may write to it but not read from it.
func openFifo(path string) (*os.File, error) {
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o622); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_RDWR, 0)
}

// settle reads what the command wrote, then lets go of its pipes. A process the command left
// running in the background may still hold them: it keeps a reader that discards what it
// writes (rather than a broken pipe that would kill it) until it closes them.
func settle(e *Exec, pipes []*os.File, paths []string, readers *sync.WaitGroup) {
	for _, pipe := range pipes {
		pipe.SetReadDeadline(time.Now())
	}
	readers.Wait()
	for i, pipe := range pipes {
		drainNow(e, []string{"stdout", "stderr"}[i], pipe)
		if reader, err := os.OpenFile(paths[i], os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			go discard(reader)
		}
		pipe.Close()
		os.Remove(paths[i])
	}
}

func discard(f *os.File) {
	defer f.Close()
	buf := make([]byte, readChunk)
	for {
		if _, err := f.Read(buf); err != nil {
			return
		}
	}
}
