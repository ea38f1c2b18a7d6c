package main

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

var sessionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

const finishedBytesCap = 64 << 20 // output of finished execs kept in all, oldest dropped first

// Agent holds everything the daemon knows; every field is guarded by mu.
type Agent struct {
	mu            sync.Mutex
	sessions      map[string]*Session
	execs         map[string]*Exec
	finishedOrder []*Exec
	finishedBytes int
	processes     map[string]*Process
	shellPath     string
	shellName     string
	baseEnv       []string
}

func newAgent() *Agent {
	a := &Agent{
		sessions:  map[string]*Session{},
		execs:     map[string]*Exec{},
		processes: map[string]*Process{},
		baseEnv:   os.Environ(),
	}
	a.shellPath, a.shellName = findShell()
	return a
}

// findShell is bash if the image has it, else sh.
func findShell() (path, name string) {
	for _, candidate := range []string{"/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"} {
		if info, err := os.Stat(candidate); err == nil && info.Mode()&0o111 != 0 {
			return candidate, "bash"
		}
	}
	return "/bin/sh", "sh"
}

func (a *Agent) lookup(id string) (*Exec, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.execs[id]
	if !ok {
		return nil, fail("unknown_exec", "no exec "+id+" in this sandbox (it ended long ago, or the sandbox restarted)")
	}
	return e, nil
}

func (a *Agent) register(e *Exec) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, taken := a.execs[e.id]; taken {
		return fail("bad_request", "exec id "+e.id+" is already in use")
	}
	a.execs[e.id] = e
	go func() {
		<-e.done
		a.retire(e)
	}()
	return nil
}

// retire keeps a finished exec for late readers, within the caps.
func (a *Agent) retire(e *Exec) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e.mu.Lock()
	size := e.keptBytes
	e.mu.Unlock()
	a.finishedOrder = append(a.finishedOrder, e)
	a.finishedBytes += size
	for len(a.finishedOrder) > maxFinished || (a.finishedBytes > finishedBytesCap && len(a.finishedOrder) > 1) {
		oldest := a.finishedOrder[0]
		a.finishedOrder = a.finishedOrder[1:]
		oldest.mu.Lock()
		a.finishedBytes -= oldest.keptBytes
		oldest.mu.Unlock()
		delete(a.execs, oldest.id)
	}
}

func (a *Agent) unsubscribeAll(c *conn) {
	a.mu.Lock()
	execs := make([]*Exec, 0, len(a.execs))
	for _, e := range a.execs {
		execs = append(execs, e)
	}
	a.mu.Unlock()
	for _, e := range execs {
		e.unsubscribe(c)
	}
}

// --- run ---------------------------------------------------------------------------------------

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

// --- reset -------------------------------------------------------------------------------------

// reset ends every process of the sandbox user, whatever it is and however it hid (it works
// with the sandbox at its pids limit: killing forks nothing). Running commands end as
// killed; sessions start a new shell at their next command, with their last state; managed
// processes start again at once. The workspace is not touched.
func (a *Agent) reset() int {
	a.mu.Lock()
	running := make([]*Exec, 0)
	for _, e := range a.execs {
		running = append(running, e)
	}
	processes := make([]*Process, 0, len(a.processes))
	for _, p := range a.processes {
		processes = append(processes, p)
	}
	a.mu.Unlock()
	for _, e := range running {
		e.mu.Lock()
		if !e.finished && e.killer != nil {
			e.killed = true
		}
		e.mu.Unlock()
	}
	killed := killSandboxUser()
	for _, p := range processes {
		select {
		case p.now <- struct{}{}:
		default:
		}
	}
	return killed
}

// --- sessions ----------------------------------------------------------------------------------

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

// --- managed processes -------------------------------------------------------------------------

// Process is a long-running program the agent keeps alive: restarted with backoff when it
// dies, each run an exec of its own ("name~generation") whose output is kept like any other.
type Process struct {
	agent   *Agent
	name    string
	req     request
	mu      sync.Mutex
	current *Exec
	gen     int
	state   string
	restart int
	last    *int
	backoff time.Duration
	stop    chan struct{}
	stopped bool
	now     chan struct{} // a reset: start again now, not after the backoff
}

func (a *Agent) startProcess(req *request) (reply, error) {
	if !sessionName.MatchString(req.Name) {
		return nil, fail("bad_request", fmt.Sprintf("invalid process name %q", req.Name))
	}
	if (req.Shell == nil) == (len(req.Argv) == 0) {
		return nil, fail("bad_request", "give either shell or argv")
	}
	a.mu.Lock()
	generation := 0
	if p, ok := a.processes[req.Name]; ok {
		if !p.isStopped() {
			a.mu.Unlock()
			return p.info(), nil
		}
		p.mu.Lock()
		generation = p.gen // a new start continues the numbering: exec ids stay unique
		p.mu.Unlock()
	}
	p := &Process{agent: a, name: req.Name, req: *req, state: "starting", stop: make(chan struct{}),
		now: make(chan struct{}, 1), gen: generation}
	a.processes[req.Name] = p
	a.mu.Unlock()
	started := make(chan struct{})
	go p.supervise(started)
	<-started
	return p.info(), nil
}

func (p *Process) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

func (p *Process) supervise(started chan struct{}) {
	backoff := time.Second
	signalled := false
	for {
		p.mu.Lock()
		p.gen++
		e := newExec(fmt.Sprintf("%s~%d", p.name, p.gen), "", true, p.req.Keep)
		p.current = e
		p.state = "running"
		p.mu.Unlock()
		p.agent.register(e)
		argv := p.req.Argv
		if p.req.Shell != nil {
			argv = []string{p.agent.shellName, "-c", *p.req.Shell}
		}
		cwd := p.req.Cwd
		if cwd == "" {
			cwd = "/workspace"
		}
		began := time.Now()
		sp, err := spawn(e, p.agent.shellArgv(argv), cwd, overlay(p.agent.baseEnv, p.req.Env), true)
		if !signalled {
			close(started)
			signalled = true
		}
		code := -1
		if err != nil {
			failToStart(e, err)
		} else {
			code, err = sp.wait(e, 200*time.Millisecond)
			e.finish(code, false, false, "", errorText(err))
			killTag(e.tag, syscall.SIGKILL) // a run's leftovers never meet the next run
		}
		p.mu.Lock()
		p.last = &code
		if p.stopped {
			p.state = "stopped"
			p.mu.Unlock()
			return
		}
		if !p.req.Restart {
			p.state = "exited"
			p.mu.Unlock()
			return
		}
		if time.Since(began) > time.Minute {
			backoff = time.Second
		}
		p.restart++
		p.state = "backoff"
		p.backoff = backoff
		p.mu.Unlock()
		select {
		case <-time.After(backoff):
		case <-p.now:
			backoff = time.Second / 2 // doubled below: the next failure waits a second
		case <-p.stop:
			p.mu.Lock()
			p.state = "stopped"
			p.mu.Unlock()
			return
		}
		backoff *= 2
		if backoff > 30*time.Second {
			backoff = 30 * time.Second
		}
	}
}

func (p *Process) info() reply {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := reply{"name": p.name, "state": p.state, "restarts": p.restart, "generation": p.gen,
		"backoff_ms": p.backoff.Milliseconds(), "last_exit_code": p.last}
	if p.current != nil {
		r["exec"] = p.current.id
		r["pid"] = p.current.status()["pid"]
	}
	return r
}

func (a *Agent) listProcesses() []reply {
	a.mu.Lock()
	list := make([]*Process, 0, len(a.processes))
	for _, p := range a.processes {
		list = append(list, p)
	}
	a.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	out := make([]reply, 0, len(list))
	for _, p := range list {
		out = append(out, p.info())
	}
	return out
}

func (a *Agent) stopProcess(name string) (reply, error) {
	a.mu.Lock()
	p, ok := a.processes[name]
	a.mu.Unlock()
	if !ok {
		return nil, fail("unknown_process", "no process "+name)
	}
	p.mu.Lock()
	already := p.stopped
	p.stopped = true
	current := p.current
	p.mu.Unlock()
	if !already {
		close(p.stop)
	}
	if current != nil {
		current.kill("TERM")
		select {
		case <-current.done:
		case <-time.After(3 * time.Second):
			current.kill("KILL")
			<-current.done
		}
	}
	return p.info(), nil
}

// --- environment -------------------------------------------------------------------------------

// overlay returns env (KEY=VALUE list) with the given variables set.
func overlay(env []string, extra map[string]string) []string {
	if len(extra) == 0 {
		return env
	}
	out := make([]string, 0, len(env)+len(extra))
	for _, kv := range env {
		name := kv
		if i := strings.IndexByte(kv, '='); i >= 0 {
			name = kv[:i]
		}
		if _, replaced := extra[name]; !replaced {
			out = append(out, kv)
		}
	}
	names := make([]string, 0, len(extra))
	for name := range extra {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		out = append(out, name+"="+extra[name])
	}
	return out
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}
