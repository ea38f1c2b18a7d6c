package main

// Code contexts: a stateful interpreter per context (a Jupyter kernel for Python, node's vm
// for JavaScript), started on first use as the sandbox user with a tag of its own, kept
// until it is restarted or deleted, the sandbox is reset, or it dies. A run of code is an
// exec like any other (its output kept, pushed, waited for, killed), whose stdout is the
// interpreter's results as JSON lines (kernel.py says which), which its driver writes on
// fd 3 (its fds 1 and 2 are /dev/null). Killing it, or its timeout,
// interrupts the interpreter; one that ignores the interrupt is ended after a grace period
// (its state is lost, the next run starts a new one).

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"
)

//go:embed kernel.py
var pythonDriver string

//go:embed kernel.js
var javascriptDriver string

const (
	maxContexts    = 16
	contextQueue   = 64
	startPatience  = 90 * time.Second
	interruptGrace = 3 * time.Second
)

// Kernel is one code context: its language and starting place, and its interpreter while
// one runs.
type Kernel struct {
	agent    *Agent
	name     string
	language string
	cwd      string
	env      map[string]string
	created  time.Time
	queue    chan *job

	mu       sync.Mutex
	closed   bool
	busy     *Exec
	driver   *driverProc
	runs     int
	restarts int
}

// driverProc is a running interpreter: the driver the agent speaks to, and the pid the
// interrupt goes to.
type driverProc struct {
	tag    uint32
	pid    int
	target int // where an interrupt goes, and how
	signal syscall.Signal
	stdin  *os.File
	lines  chan []byte
	dead   chan struct{}
}

type driverLine struct {
	Type   string `json:"type"`
	Pid    int    `json:"pid"`
	Signal string `json:"signal"`
	Error  string `json:"error"`
	Status string `json:"status"`
}

var languages = map[string]bool{"python": true, "javascript": true}

func (a *Agent) createContext(req *request) (*Kernel, error) {
	if !sessionName.MatchString(req.Context) {
		return nil, fail("bad_request", fmt.Sprintf("invalid context name %q", req.Context))
	}
	language := req.Language
	if language == "" {
		language = "python"
	}
	if !languages[language] {
		return nil, fail("unsupported_language", fmt.Sprintf("no %q interpreter: python or javascript", language))
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/workspace"
	}
	if !isDirAsSandbox(cwd) {
		return nil, fail("bad_request", "cwd "+cwd+" is not a directory")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, taken := a.kernels[req.Context]; taken {
		return nil, fail("context_exists", "context "+req.Context+" exists")
	}
	if len(a.kernels) >= maxContexts {
		return nil, fail("too_many", fmt.Sprintf("this sandbox has %d code contexts, the most it may have; delete one first", maxContexts))
	}
	k := &Kernel{agent: a, name: req.Context, language: language, cwd: cwd, env: req.Env,
		created: time.Now(), queue: make(chan *job, contextQueue)}
	a.kernels[k.name] = k
	go k.work()
	return k, nil
}

// context is a context by name, made if the agent does not have it and the request says
// how it starts (`init`: its cwd and environment, with its language; Boxyard keeps them, so
// a new container, or a restarted agent, brings a context back, without its state).
func (a *Agent) context(req *request) (*Kernel, error) {
	name := req.Context
	if name == "" {
		name = "default"
	}
	a.mu.Lock()
	k, ok := a.kernels[name]
	a.mu.Unlock()
	if ok {
		if req.Language != "" && req.Language != k.language {
			return nil, fail("bad_request", fmt.Sprintf("context %s runs %s, not %s", name, k.language, req.Language))
		}
		return k, nil
	}
	if req.Init == nil && name != "default" {
		return nil, fail("unknown_context", "no code context "+name)
	}
	spec := &request{Context: name, Language: req.Language}
	if req.Init != nil {
		spec.Cwd, spec.Env = req.Init.Cwd, req.Init.Env
	}
	k, err := a.createContext(spec)
	if f, ok := err.(*failure); ok && f.code == "context_exists" {
		return a.context(req)
	}
	return k, err
}

func (a *Agent) listContexts() []reply {
	a.mu.Lock()
	list := make([]*Kernel, 0, len(a.kernels))
	for _, k := range a.kernels {
		list = append(list, k)
	}
	a.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].created.Before(list[j].created) })
	out := make([]reply, 0, len(list))
	for _, k := range list {
		out = append(out, k.info())
	}
	return out
}

func (k *Kernel) info() reply {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := reply{"context": k.name, "language": k.language, "cwd": k.cwd, "running": k.driver != nil,
		"busy": k.busy != nil, "runs": k.runs, "restarts": k.restarts}
	if k.driver != nil {
		r["pid"] = k.driver.target
	}
	if k.busy != nil {
		r["exec"] = k.busy.id
	}
	return r
}

// restart ends the context's interpreter (and whatever its code started); the next run
// starts a new one, with none of the old state.
func (a *Agent) restartContext(name string) (reply, error) {
	a.mu.Lock()
	k, ok := a.kernels[name]
	a.mu.Unlock()
	if !ok {
		return nil, fail("unknown_context", "no code context "+name)
	}
	k.stop()
	return k.info(), nil
}

func (a *Agent) deleteContext(name string) error {
	a.mu.Lock()
	k, ok := a.kernels[name]
	delete(a.kernels, name)
	a.mu.Unlock()
	if !ok {
		return fail("unknown_context", "no code context "+name)
	}
	k.mu.Lock()
	k.closed = true
	close(k.queue)
	k.mu.Unlock()
	k.stop()
	return nil
}

func (k *Kernel) stop() {
	k.mu.Lock()
	d := k.driver
	k.driver = nil
	k.mu.Unlock()
	if d != nil {
		killTag(d.tag, syscall.SIGKILL)
		<-d.dead
	}
}

// runCode queues a run of code in its context; it is answered when the run ends.
func (a *Agent) runCode(c *conn, req *request) {
	if req.Exec == "" {
		c.answer(req.ID, nil, fail("bad_request", "exec (an id for the run) is required"))
		return
	}
	k, err := a.context(req)
	if err != nil {
		c.answer(req.ID, nil, err)
		return
	}
	e := newExec(req.Exec, "code:"+k.name, false, req.Keep)
	if err := a.register(e); err != nil {
		c.answer(req.ID, nil, err)
		return
	}
	watch(c, e, req)
	var answered sync.Once
	answer := func() {
		answered.Do(func() { c.answer(req.ID, statusWithHead(e, req.Limit), nil) })
	}
	// Killed while it waits its turn, it ends then, answered, and never runs.
	e.mu.Lock()
	e.killer = func(syscall.Signal) {
		e.finish(-1, false, false, "", "killed before its turn came")
		answer()
	}
	e.mu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		e.finish(-1, false, false, "", "the context was deleted")
		c.answer(req.ID, nil, fail("unknown_context", "no code context "+k.name))
		return
	}
	select {
	case k.queue <- &job{exec: e, req: req, answer: answer}:
	default:
		e.finish(-1, false, false, "", "busy")
		c.answer(req.ID, nil, fail("busy", fmt.Sprintf("context %s has %d runs waiting", k.name, contextQueue)))
	}
}

func (k *Kernel) work() {
	for j := range k.queue {
		k.mu.Lock()
		closed := k.closed
		k.busy = j.exec
		k.mu.Unlock()
		j.exec.mu.Lock()
		ended := j.exec.finished || j.exec.killed
		j.exec.mu.Unlock()
		if closed { // deleted while this run waited its turn
			j.exec.finish(-1, false, false, "", "the context was deleted")
		} else if ended {
			j.exec.finish(-1, false, false, "", "killed before its turn came")
		} else {
			k.run(j.exec, j.req)
		}
		k.mu.Lock()
		k.busy = nil
		k.runs++
		k.mu.Unlock()
		j.answer()
	}
}

func (k *Kernel) run(e *Exec, req *request) {
	d, restarted, err := k.live()
	if err != nil {
		k.say(e, "error", reply{"name": "ContextUnavailable", "value": errorText(err), "traceback": ""})
		k.say(e, "end", reply{"status": "error"})
		e.finish(1, false, restarted, "", errorText(err))
		return
	}
	if restarted {
		k.say(e, "restarted", reply{"value": "the context's interpreter had ended; this run started a new one, without the old state"})
	}
	e.mu.Lock()
	e.pid = d.target
	e.tag = d.tag
	e.killer = func(syscall.Signal) { k.interrupt(e, d) }
	e.mu.Unlock()
	timedOut := watchTimeout(e, req.Timeout)
	line, _ := json.Marshal(reply{"code": req.Code, "env": req.Env})
	if _, err := d.stdin.Write(append(line, '\n')); err != nil {
		k.say(e, "end", reply{"status": "died"})
		e.finish(1, timedOut(), restarted, "", "the interpreter ended")
		return
	}
	status := "died"
	for {
		raw, open := <-d.lines
		if !open {
			k.say(e, "error", reply{"name": "ContextDied", "value": "the interpreter ended (out of memory, killed, or not answering an interrupt); its state is lost: the next run starts a new one", "traceback": ""})
			k.say(e, "end", reply{"status": "died"})
			break
		}
		e.append("stdout", append(raw, '\n'))
		var said driverLine
		if json.Unmarshal(raw, &said) == nil && said.Type == "end" {
			status = said.Status
			break
		}
	}
	code := 0
	if status != "ok" {
		code = 1
	}
	if status == "died" {
		// Its driver ends with its kernel: gone before the next run, which starts anew.
		killTag(d.tag, syscall.SIGKILL)
		<-d.dead
	}
	e.finish(code, timedOut(), restarted, "", "")
}

// say appends a line of Boxyard's own to a run's results, in the driver's format.
func (k *Kernel) say(e *Exec, kind string, fields reply) {
	fields["type"] = kind
	line, _ := json.Marshal(fields)
	e.append("stdout", append(line, '\n'))
}

// interrupt asks the interpreter to stop the run (Python's driver passes it on to the
// kernel as SIGINT once the run has begun, as Jupyter does; node takes SIGINT itself); one
// still running after the grace period is ended, with what it started.
func (k *Kernel) interrupt(e *Exec, d *driverProc) {
	syscall.Kill(d.target, d.signal)
	time.AfterFunc(interruptGrace, func() {
		select {
		case <-e.done:
		default:
			killTag(d.tag, syscall.SIGKILL)
		}
	})
}

// live is the context's running interpreter, started if there is none (restarted is then
// true when an earlier one had died on its own).
func (k *Kernel) live() (*driverProc, bool, error) {
	k.mu.Lock()
	d := k.driver
	k.mu.Unlock()
	restarted := false
	if d != nil {
		select {
		case <-d.dead:
			restarted = true
			k.mu.Lock()
			k.driver = nil
			k.restarts++
			k.mu.Unlock()
		default:
			return d, false, nil
		}
	}
	d, err := k.start()
	if err != nil {
		return nil, restarted, err
	}
	k.mu.Lock()
	k.driver = d
	k.mu.Unlock()
	return d, restarted, nil
}

func (k *Kernel) start() (*driverProc, error) {
	env := overlay(k.agent.baseEnv, k.env)
	argv := []string{"python3", "-c", pythonDriver}
	if k.language == "javascript" {
		argv = []string{"node", "-e", javascriptDriver}
	}
	path, err := lookPathAsSandbox(argv[0], env, k.cwd)
	if err != nil {
		return nil, fail("unsupported_language", fmt.Sprintf("this sandbox's image has no %s for %s code (Boxyard's default image has both python3 with ipykernel and node)", argv[0], k.language))
	}
	env = append(env, "BOXYARD_MATPLOTLIB_CACHE=/usr/local/share/boxyard/matplotlib")
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	tag := newTag()
	proc, err := startForSandbox(path, argv, &os.ProcAttr{
		Dir: k.cwd, Env: env, Files: []*os.File{inR, null, null, outW}, Sys: asSandbox(tag),
	})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	d := &driverProc{tag: tag, pid: proc.Pid, stdin: inW, lines: make(chan []byte, 256), dead: make(chan struct{})}
	go d.read(outR)
	go func() {
		waitPid(proc.Pid)
		killTag(tag, syscall.SIGKILL) // the interpreter and what its code left running
		inW.Close()
	}()
	select {
	case raw, open := <-d.lines:
		var said driverLine
		if open && json.Unmarshal(raw, &said) == nil && said.Type == "ready" {
			d.target, d.signal = said.Pid, syscall.SIGINT
			if said.Signal == "USR1" {
				d.signal = syscall.SIGUSR1
			}
			return d, nil
		}
		killTag(tag, syscall.SIGKILL)
		if said.Error != "" {
			return nil, fail("interpreter_failed", "the "+k.language+" interpreter did not start: "+said.Error)
		}
		return nil, fail("interpreter_failed", "the "+k.language+" interpreter ended as it started")
	case <-time.After(startPatience):
		killTag(tag, syscall.SIGKILL)
		return nil, fail("interpreter_failed", "the "+k.language+" interpreter did not start in time")
	}
}

// read passes the driver's lines on until it closes its stdout (it ended).
func (d *driverProc) read(r *os.File) {
	defer close(d.dead)
	defer close(d.lines)
	defer r.Close()
	reader := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(reader)
		if len(line) > 0 && line[len(line)-1] == '\n' {
			line = line[:len(line)-1]
		}
		if len(line) > 0 {
			d.lines <- line
		}
		if err != nil {
			return
		}
	}
}
