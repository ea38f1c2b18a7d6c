package main

// The Agent: the daemon's registry of execs (finished ones kept for late readers, within
// caps), sessions and managed processes, and the reset of the whole sandbox.

import (
	"os"
	"sync"
)

// Finished execs kept for late readers; the oldest go first. Their output is kept within the
// budget of all output (budget.go), oldest first.
const maxFinished = 500

// Agent holds everything the daemon knows; every field is guarded by mu.
type Agent struct {
	mu            sync.Mutex
	sessions      map[string]*Session
	execs         map[string]*Exec
	finishedOrder []*Exec
	output        *budget
	processes     map[string]*Process
	kernels       map[string]*Kernel
	shellPath     string
	shellName     string
	baseEnv       []string
}

func newAgent(outputBytes int) *Agent {
	a := &Agent{
		output:    newBudget(outputBytes),
		sessions:  map[string]*Session{},
		execs:     map[string]*Exec{},
		processes: map[string]*Process{},
		kernels:   map[string]*Kernel{},
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
	e.mu.Lock()
	e.budget = a.output
	e.mu.Unlock()
	go func() {
		<-e.done
		a.retire(e)
	}()
	return nil
}

// retire keeps a finished exec for late readers, within the cap; what it kept of its output
// stays within the budget of all output.
func (a *Agent) retire(e *Exec) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.finishedOrder = append(a.finishedOrder, e)
	for len(a.finishedOrder) > maxFinished {
		oldest := a.finishedOrder[0]
		a.finishedOrder = a.finishedOrder[1:]
		delete(a.execs, oldest.id)
		a.output.release(oldest)
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
		e.unsubscribe(c, 0)
	}
}

// reset ends every process of the sandbox user, whatever it is and however it hid (it works
// with the sandbox at its pids limit: killing forks nothing). Running commands end as
// killed; sessions start a new shell at their next command, with their last state; managed
// processes start again at once; code contexts start a new interpreter at their next run.
// The workspace is not touched.
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
