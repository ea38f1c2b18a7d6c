package main

// Managed processes: long-running programs the agent keeps alive, and their supervision.

import (
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"
)

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
