package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Session is a shell that keeps its cwd, exported variables and functions between commands.
//
// Foreground commands run one at a time, in the order they arrived, inside the shell itself
// (sourced in a { group }, so `cd`, `export` and functions stay). After each one the shell
// writes its cwd, `export -p` and (bash) `declare -f` to the session's directory and reports
// on a status pipe. When a command ends the shell (exit, exec, set -e, a kill), the session
// starts a new shell from those files and says so in the command's result. The files also
// let a restarted agent bring the session back as it was.
type Session struct {
	agent *Agent
	name  string
	dir   string

	mu     sync.Mutex
	shell  *shellProc
	queue  chan *job
	closed bool
	busy   *Exec
}

type shellProc struct {
	proc    *os.Process
	tag     uint32
	stdin   *os.File
	status  chan string
	dead    chan struct{}
	code    int
	retired bool // a command left processes in its tag: the next command gets a new shell
}

const (
	queueLength = 1024
	maxState    = 8 << 20
)

// The shell's side of the protocol. __BY is the session's directory; fd 9 the status pipe.
const shellInit = `__by_s() {
  pwd >"$__BY/cwd" 2>/dev/null || :
  export -p >"$__BY/env" 2>/dev/null || :
  if [ -n "${BASH_VERSION:-}" ]; then declare -f >"$__BY/fn" 2>/dev/null || :; fi
  printf '%s %s\n' "$1" "$2" >&9 || :
}
`

func newSession(a *Agent, name string, init *sessionInit) (*Session, error) {
	s := &Session{agent: a, name: name, dir: filepath.Join(stateDir, "s", name), queue: make(chan *job, queueLength)}
	_, err := os.Stat(filepath.Join(s.dir, "cwd"))
	restored := err == nil
	if err := s.prepareDir(); err != nil {
		return nil, err
	}
	if !restored {
		// New (not restored after an agent restart): its starting state comes from the caller.
		cwd, env := "/workspace", a.baseEnv
		if init != nil {
			if init.Cwd != "" {
				cwd = init.Cwd
			}
			env = overlay(env, init.Env)
		}
		if err := s.saveState(cwd, env); err != nil {
			return nil, err
		}
	}
	if err := s.startShell(); err != nil {
		return nil, err
	}
	go s.work()
	return s, nil
}

// prepareDir makes the session's directory. It is the agent's (root's, and nobody else may
// add, remove or replace a file in it); the state files in it are open to the shell, which
// runs as the sandbox user and rewrites them after every command.
func (s *Session) prepareDir() error {
	if err := os.Mkdir(s.dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Chmod(s.dir, 0o711); err != nil {
		return err
	}
	for _, name := range []string{"cwd", "env", "fn"} {
		file, err := os.OpenFile(filepath.Join(s.dir, name), os.O_WRONLY|os.O_CREATE, 0o666)
		if err != nil {
			return err
		}
		file.Close()
		if err := os.Chmod(filepath.Join(s.dir, name), 0o666); err != nil {
			return err
		}
	}
	return nil
}

func (s *Session) saveState(cwd string, env []string) error {
	var b strings.Builder
	for _, kv := range env {
		if i := strings.IndexByte(kv, '='); i > 0 && validName(kv[:i]) {
			fmt.Fprintf(&b, "export %s=%s\n", kv[:i], shellQuote(kv[i+1:]))
		}
	}
	if err := os.WriteFile(filepath.Join(s.dir, "env"), []byte(b.String()), 0o666); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dir, "cwd"), []byte(cwd+"\n"), 0o666)
}

// current is the session's cwd and environment as of its last command.
func (s *Session) current() (string, []string) {
	cwd := "/workspace"
	if data, err := readState(filepath.Join(s.dir, "cwd")); err == nil {
		if text := strings.TrimRight(string(data), "\n"); text != "" {
			cwd = text
		}
	}
	env := s.agent.baseEnv
	if data, err := readState(filepath.Join(s.dir, "env")); err == nil && len(data) > 0 {
		env = parseExports(string(data))
	}
	return cwd, env
}

// readState reads a state file the sandbox's code may have written anything into: at most
// maxState bytes of it.
func readState(path string) ([]byte, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return io.ReadAll(io.LimitReader(file, maxState))
}

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
	proc, err := os.StartProcess(s.agent.shellPath, argv, &os.ProcAttr{
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

func (s *Session) enqueue(j *job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fail("unknown_session", "session "+s.name+" was deleted")
	}
	select {
	case s.queue <- j:
		return nil
	default:
		return fail("busy", fmt.Sprintf("session %s has %d commands waiting", s.name, queueLength))
	}
}

func (s *Session) work() {
	for j := range s.queue {
		s.mu.Lock()
		closed := s.closed
		s.busy = j.exec
		s.mu.Unlock()
		if closed {
			j.exec.finish(-1, false, false, "", "the session was deleted")
		} else if j.req.Shell != nil {
			s.runInShell(j)
		} else {
			s.runArgv(j)
		}
		s.mu.Lock()
		s.busy = nil
		s.mu.Unlock()
		j.answer()
	}
}

func (s *Session) close() {
	s.mu.Lock()
	s.closed = true
	sh := s.shell
	close(s.queue)
	s.mu.Unlock()
	if sh != nil {
		killTag(sh.tag, syscall.SIGKILL)
	}
	os.RemoveAll(s.dir)
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

// writeReadable writes a file of the agent's that the sandbox user may read.
func writeReadable(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	return os.Chmod(path, 0o644)
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

func (s *Session) runArgv(j *job) {
	e, req := j.exec, j.req
	cwd, env := s.current()
	if req.Cwd != "" {
		cwd = req.Cwd
	}
	if !isDirAsSandbox(cwd) {
		e.append("stderr", []byte(fmt.Sprintf("boxyard: cwd %s is not a directory\n", cwd)))
		e.finish(210, false, false, cwd, "")
		return
	}
	sp, err := spawn(e, req.Argv, cwd, overlay(env, req.Env), false)
	if err != nil {
		failToStart(e, err)
		return
	}
	timedOut := watchTimeout(e, req.Timeout)
	code, err := sp.wait(e, 20*time.Millisecond)
	sessionCwd, _ := s.current()
	e.finish(code, timedOut(), false, sessionCwd, errorText(err))
}

func (s *Session) info() reply {
	cwd, env := s.current()
	vars := map[string]string{}
	for _, kv := range env {
		if i := strings.IndexByte(kv, '='); i > 0 {
			switch kv[:i] {
			case "PWD", "OLDPWD", "SHLVL", "_":
			default:
				vars[kv[:i]] = kv[i+1:]
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := reply{"name": s.name, "cwd": cwd, "env": vars, "busy": s.busy != nil}
	if s.busy != nil {
		r["exec"] = s.busy.id
	}
	if s.shell != nil {
		r["pid"] = s.shell.proc.Pid
	}
	return r
}

// --- shell text --------------------------------------------------------------------------------

func shellQuote(text string) string {
	return "'" + strings.ReplaceAll(text, "'", `'\''`) + "'"
}

func validName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		if !(r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

// parseExports reads `export -p` as bash (declare -x NAME="v"), dash and busybox
// (export NAME='v') print it, into KEY=VALUE pairs. Variables without a value are skipped.
func parseExports(text string) []string {
	var env []string
	i := 0
	for i < len(text) {
		for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n') {
			i++
		}
		switch {
		case strings.HasPrefix(text[i:], "declare "):
			i += len("declare ")
			for i < len(text) && text[i] == '-' { // flags: -x, -rx, ...
				for i < len(text) && text[i] != ' ' {
					i++
				}
				i++
			}
		case strings.HasPrefix(text[i:], "export "):
			i += len("export ")
		default:
			for i < len(text) && text[i] != '\n' {
				i++
			}
			continue
		}
		start := i
		for i < len(text) && text[i] != '=' && text[i] != '\n' && text[i] != ' ' {
			i++
		}
		name := text[start:i]
		if i >= len(text) || text[i] != '=' {
			continue
		}
		i++
		value, next := shellWord(text, i)
		i = next
		if validName(name) {
			env = append(env, name+"="+value)
		}
	}
	return env
}

// shellWord reads one shell word made of '...', "...", \x and plain characters.
func shellWord(text string, i int) (string, int) {
	var b strings.Builder
	for i < len(text) {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			return b.String(), i
		case c == '\'':
			end := strings.IndexByte(text[i+1:], '\'')
			if end < 0 {
				b.WriteString(text[i+1:])
				return b.String(), len(text)
			}
			b.WriteString(text[i+1 : i+1+end])
			i += end + 2
		case c == '"':
			i++
			for i < len(text) && text[i] != '"' {
				if text[i] == '\\' && i+1 < len(text) && strings.IndexByte("\"\\$`\n", text[i+1]) >= 0 {
					if text[i+1] != '\n' {
						b.WriteByte(text[i+1])
					}
					i += 2
					continue
				}
				b.WriteByte(text[i])
				i++
			}
			i++
		case c == '\\' && i+1 < len(text):
			b.WriteByte(text[i+1])
			i += 2
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), i
}
