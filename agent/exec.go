package main

// An exec: the record of one command (its status, end, kill and stdin). Its output is in
// output.go; starting its program, in spawn.go.

import (
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

const defaultKeep = 16 << 20 // output kept per exec unless the run asks for another amount

// Exec is one command and its output: chunks numbered from 1 in the order they were read,
// kept up to `keep` bytes (beyond that they are counted as dropped, never renumbered), and
// within the sandbox's budget for all output (budget.go: past it the oldest chunks go).
type Exec struct {
	id         string
	session    string
	background bool
	started    time.Time

	mu          sync.Mutex
	chunks      []chunk // those kept, in order, numbered without gaps up to lastSeq
	lastSeq     int
	held        int // bytes of the chunks kept now
	keptBytes   int // bytes taken in all, against `keep`
	keptStderr  int
	keep        int
	dropped     int // bytes never kept: past `keep`, or past the budget itself
	evicted     int // bytes kept, then dropped (oldest first) to stay within the budget
	budget      *budget
	bytes       map[string]int
	pid         int
	finished    bool
	exitCode    int
	timedOut    bool
	killed      bool
	restarted   bool
	cwd         string
	err         string
	duration    time.Duration
	subscribers map[subscription]bool
	stdin       *os.File
	stdinQueue  chan stdinWrite
	killer      func(sig syscall.Signal)
	done        chan struct{}
	changed     chan struct{} // closed (and replaced) at every new chunk and at the end

	// The tag of the command's processes (see contain.go). ownsTag: the tag is this exec's
	// alone, so what carries it after the command ended is what the command left behind
	// (every exec but a session's shell command, which shares its shell's tag unless it
	// left processes running). They are killed when the deadline passes, or on `kill`.
	tag       uint32
	ownsTag   bool
	deadline  time.Time
	oomBefore int
	oomKilled bool
	leftovers int
}

func newExec(id, session string, background bool, keep int) *Exec {
	if keep <= 0 {
		keep = defaultKeep
	}
	return &Exec{
		id: id, session: session, background: background, started: time.Now(), keep: keep,
		bytes: map[string]int{"stdout": 0, "stderr": 0}, subscribers: map[subscription]bool{},
		done: make(chan struct{}), changed: make(chan struct{}), oomBefore: oomKills(),
	}
}

// limit sets the command's timeout: its processes, and what it leaves behind, end then.
func (e *Exec) limit(seconds float64) {
	if seconds > 0 {
		e.mu.Lock()
		e.deadline = e.started.Add(time.Duration(seconds * float64(time.Second)))
		e.mu.Unlock()
	}
}

func (e *Exec) finish(exitCode int, timedOut, restarted bool, cwd, errText string) {
	e.mu.Lock()
	if e.finished {
		e.mu.Unlock()
		return
	}
	e.finished = true
	e.exitCode = exitCode
	e.timedOut = timedOut
	e.restarted = restarted
	e.cwd = cwd
	e.err = errText
	e.duration = time.Since(e.started)
	e.killer = nil
	// Killed by the kernel for want of memory: a SIGKILL while the container's count of
	// such kills went up (neither a timeout nor a kill of ours).
	if exitCode == 128+int(syscall.SIGKILL) && !timedOut && !e.killed && e.oomBefore >= 0 {
		e.oomKilled = oomKills() > e.oomBefore
	}
	if e.ownsTag && e.tag != 0 {
		e.leftovers = len(members(e.tag, e.pid))
		if e.leftovers > 0 && !e.deadline.IsZero() {
			tag := e.tag
			time.AfterFunc(time.Until(e.deadline), func() { killTag(tag, syscall.SIGKILL) })
		}
	}
	status := e.statusLocked()
	for s := range e.subscribers {
		s.conn.send(reply{"event": "exit", "sub": s.id, "exec": e.id, "status": status})
	}
	e.subscribers = map[subscription]bool{}
	e.signalLocked()
	e.mu.Unlock()
	close(e.done)
}

func (e *Exec) status() reply {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.statusLocked()
}

func (e *Exec) statusLocked() reply {
	r := reply{
		"exec": e.id, "session": e.session, "background": e.background, "pid": e.pid,
		"finished": e.finished, "stdout_bytes": e.bytes["stdout"], "stderr_bytes": e.bytes["stderr"],
		"last_seq": e.lastSeq, "dropped_bytes": e.dropped + e.evicted, "evicted_bytes": e.evicted,
	}
	if e.finished {
		r["exit_code"] = e.exitCode
		r["timed_out"] = e.timedOut
		r["killed"] = e.killed
		r["session_restarted"] = e.restarted
		r["oom_killed"] = e.oomKilled
		r["left_running"] = e.leftovers
		r["duration_ms"] = e.duration.Milliseconds()
		r["cwd"] = e.cwd
		r["error"] = e.err
	} else {
		r["duration_ms"] = time.Since(e.started).Milliseconds()
	}
	return r
}

func (e *Exec) kill(signal string) {
	sig := syscall.SIGKILL
	switch strings.TrimPrefix(strings.ToUpper(signal), "SIG") {
	case "TERM":
		sig = syscall.SIGTERM
	case "INT":
		sig = syscall.SIGINT
	case "HUP":
		sig = syscall.SIGHUP
	}
	e.mu.Lock()
	killer, finished, tag, owns := e.killer, e.finished, e.tag, e.ownsTag
	if killer != nil && !finished {
		e.killed = true
	}
	e.mu.Unlock()
	if killer != nil && !finished {
		killer(sig)
	} else if finished && owns {
		killTag(tag, sig) // what it left running
	}
}

type stdinWrite struct {
	data  []byte
	eof   bool
	reply func(error)
}

func (e *Exec) writeStdin(data []byte, eof bool, reply func(error)) {
	e.mu.Lock()
	queue := e.stdinQueue
	finished := e.finished
	e.mu.Unlock()
	if queue == nil {
		reply(fail("no_stdin", "this exec was not started with stdin open"))
		return
	}
	if finished {
		reply(fail("finished", "the process has ended"))
		return
	}
	select {
	case queue <- stdinWrite{data, eof, reply}:
	default:
		reply(fail("busy", "too many stdin writes are waiting; read the process's output first"))
	}
}

func (e *Exec) stdinLoop() {
	for w := range e.stdinQueue {
		var err error
		if e.stdin == nil {
			err = fail("no_stdin", "stdin is closed")
		} else {
			if len(w.data) > 0 {
				if _, werr := e.stdin.Write(w.data); werr != nil {
					err = fail("finished", "the process does not read its stdin any more: "+werr.Error())
				}
			}
			if w.eof {
				e.stdin.Close()
				e.stdin = nil
			}
		}
		w.reply(err)
	}
}
