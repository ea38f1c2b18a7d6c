package main

// Sessions: a Session's saved state and queue of commands, and the agent's table of them.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
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

const (
	queueLength = 1024
	maxState    = 8 << 20
)

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

var sessionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func (a *Agent) ensureSession(name string, init *sessionInit) (*Session, bool, error) {
	if !sessionName.MatchString(name) {
		return nil, false, fail("bad_request", fmt.Sprintf("invalid session name %q", name))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.sessions[name]; ok {
		return s, false, nil
	}
	s, err := newSession(a, name, init)
	if err != nil {
		return nil, false, err
	}
	a.sessions[name] = s
	return s, true, nil
}

func (a *Agent) listSessions() []reply {
	a.mu.Lock()
	list := make([]*Session, 0, len(a.sessions))
	for _, s := range a.sessions {
		list = append(list, s)
	}
	a.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	out := make([]reply, 0, len(list))
	for _, s := range list {
		out = append(out, s.info())
	}
	return out
}

func (a *Agent) deleteSession(name string) error {
	if name == "default" {
		return fail("bad_request", "the default session cannot be deleted")
	}
	a.mu.Lock()
	s, ok := a.sessions[name]
	delete(a.sessions, name)
	a.mu.Unlock()
	if !ok {
		return fail("unknown_session", "no session "+name)
	}
	s.close()
	return nil
}
