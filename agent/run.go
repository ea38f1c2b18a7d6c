package main

// Running commands: a `run` request as a job queued in its session, in the background, or
// fresh (outside any session), and the timeouts that end them.

import (
	"fmt"
	"sync"
	"syscall"
	"time"
)

type job struct {
	exec   *Exec
	req    *request
	answer func()
}

func (a *Agent) run(c *conn, req *request) {
	if (req.Shell == nil) == (len(req.Argv) == 0) {
		c.answer(req.ID, nil, fail("bad_request", "give either shell or argv"))
		return
	}
	if req.Exec == "" {
		c.answer(req.ID, nil, fail("bad_request", "exec (an id for the exec) is required"))
		return
	}
	limit := req.Limit
	if limit <= 0 {
		limit = 256 << 10
	}
	keep := req.Keep
	if keep < limit {
		keep = maxInt(limit, defaultKeep)
	}
	answer := func(e *Exec) func() {
		return func() {
			result := e.status()
			result["stdout"], result["stderr"] = e.head(limit)
			c.answer(req.ID, result, nil)
		}
	}
	if req.Fresh {
		if req.Background || req.Session != "" {
			c.answer(req.ID, nil, fail("bad_request", "a fresh command runs in the foreground, outside any session"))
			return
		}
		e := newExec(req.Exec, "", false, keep)
		if err := a.register(e); err != nil {
			c.answer(req.ID, nil, err)
			return
		}
		watch(c, e, req)
		go func() {
			a.runFresh(e, req)
			answer(e)()
		}()
		return
	}
	name := req.Session
	if name == "" {
		name = "default"
	}
	s, _, err := a.ensureSession(name, req.Init)
	if err != nil {
		c.answer(req.ID, nil, err)
		return
	}
	e := newExec(req.Exec, s.name, req.Background, keep)
	if err := a.register(e); err != nil {
		c.answer(req.ID, nil, err)
		return
	}
	watch(c, e, req)
	if req.Background {
		a.startBackground(s, e, req)
		c.answer(req.ID, e.status(), nil)
		return
	}
	if err := s.enqueue(&job{exec: e, req: req, answer: answer(e)}); err != nil {
		e.finish(-1, false, false, "", err.Error())
		c.answer(req.ID, nil, err)
	}
}

// watch subscribes the connection that asked for a run to its output, under the run's own id,
// before it starts: every chunk is pushed as it comes, then the exit.
func watch(c *conn, e *Exec, req *request) {
	if req.Watch {
		e.subscribe(c, req.ID, 0)
	}
}

func (a *Agent) startBackground(s *Session, e *Exec, req *request) {
	argv := req.Argv
	if req.Shell != nil {
		argv = []string{a.shellName, "-c", *req.Shell}
	}
	cwd, env := s.current()
	if req.Cwd != "" {
		cwd = req.Cwd
	}
	sp, err := spawn(e, a.shellArgv(argv), cwd, overlay(env, req.Env), req.Stdin)
	if err != nil {
		failToStart(e, err)
		return
	}
	go func() {
		timedOut := watchTimeout(e, req.Timeout)
		code, err := sp.wait(e, 200*time.Millisecond)
		e.finish(code, timedOut(), false, "", errorText(err))
	}()
}

// runFresh runs one foreground command outside any session, as a new engine exec would: in
// cwd (default /workspace), with the sandbox's own environment and the request's on top, in a
// process group of its own whose whole tree the timeout kills.
func (a *Agent) runFresh(e *Exec, req *request) {
	argv := req.Argv
	if req.Shell != nil {
		argv = []string{a.shellPath, "-c", *req.Shell}
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/workspace"
	}
	if !isDirAsSandbox(cwd) {
		e.append("stderr", []byte(fmt.Sprintf("boxyard: cwd %s is not a directory\n", cwd)))
		e.finish(210, false, false, "", "")
		return
	}
	sp, err := spawn(e, argv, cwd, overlay(a.baseEnv, req.Env), false)
	if err != nil {
		failToStart(e, err)
		return
	}
	timedOut := watchTimeout(e, req.Timeout)
	code, err := sp.wait(e, 20*time.Millisecond)
	e.finish(code, timedOut(), false, "", errorText(err))
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

// shellArgv runs a shell command with the shell found at start, whatever PATH says.
func (a *Agent) shellArgv(argv []string) []string {
	if len(argv) == 3 && argv[0] == a.shellName && argv[1] == "-c" {
		return []string{a.shellPath, "-c", argv[2]}
	}
	return argv
}

// failToStart finishes an exec whose program could not start, the way a shell reports it.
func failToStart(e *Exec, err error) {
	code := 126
	if f, ok := err.(*failure); ok && f.code == "not_found" {
		code = 127
	}
	e.append("stderr", []byte(fmt.Sprintf("boxyard: %s\n", errorText(err))))
	e.finish(code, false, false, "", errorText(err))
}

// watchTimeout kills the exec's processes when its timeout passes; the returned function
// says whether it did. What the command leaves behind is killed then too (Exec.finish).
func watchTimeout(e *Exec, seconds float64) func() bool {
	if seconds <= 0 {
		return func() bool { return false }
	}
	e.limit(seconds)
	var mu sync.Mutex
	fired := false
	timer := time.AfterFunc(time.Duration(seconds*float64(time.Second)), func() {
		e.mu.Lock()
		killer := e.killer
		e.mu.Unlock()
		if killer != nil {
			mu.Lock()
			fired = true
			mu.Unlock()
			killer(syscall.SIGKILL)
		}
	})
	return func() bool {
		timer.Stop()
		mu.Lock()
		defer mu.Unlock()
		return fired
	}
}
