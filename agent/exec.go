package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

const (
	defaultKeep   = 16 << 20 // output kept per exec unless the run asks for another amount
	maxFinished   = 500      // finished execs kept for late readers; the oldest go first
	readChunk     = 32 << 10
	defaultOutput = 64 << 10 // most bytes an `output` answer carries unless asked
	stderrReserve = 64 << 10 // stderr kept beyond the exec's cap, so a flood never hides it
)

type chunk struct {
	seq    int
	stream string
	data   []byte
}

type subscriber struct {
	conn *conn
	sub  uint64
}

// Exec is one command and its output: chunks numbered from 1 in the order they were read,
// kept up to `keep` bytes (beyond that they are counted as dropped, never renumbered).
type Exec struct {
	id         string
	session    string
	background bool
	started    time.Time

	mu          sync.Mutex
	chunks      []chunk
	keptBytes   int
	keptStderr  int
	keep        int
	dropped     int
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
	subscribers map[*conn]uint64
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

type stdinWrite struct {
	data  []byte
	eof   bool
	reply func(error)
}

func newExec(id, session string, background bool, keep int) *Exec {
	if keep <= 0 {
		keep = defaultKeep
	}
	return &Exec{
		id: id, session: session, background: background, started: time.Now(), keep: keep,
		bytes: map[string]int{"stdout": 0, "stderr": 0}, subscribers: map[*conn]uint64{},
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

func (e *Exec) append(stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.bytes[stream] += len(data)
	room := e.keep - e.keptBytes
	if stream == "stderr" && e.keptStderr < stderrReserve {
		// A flood on stdout does not hide what the command says on stderr (its last words).
		room = maxInt(room, stderrReserve-e.keptStderr)
	}
	if room <= 0 {
		e.dropped += len(data)
		return
	}
	if len(data) > room {
		e.dropped += len(data) - room
		data = data[:room]
	}
	c := chunk{seq: len(e.chunks) + 1, stream: stream, data: append([]byte(nil), data...)}
	e.chunks = append(e.chunks, c)
	e.keptBytes += len(c.data)
	if stream == "stderr" {
		e.keptStderr += len(c.data)
	}
	for subscriber, sub := range e.subscribers {
		subscriber.send(chunkEvent(sub, e.id, c))
	}
	e.signalLocked()
}

func (e *Exec) signalLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// waitBeyond waits until there is a chunk after sinceSeq or the exec has ended, at most for
// the given time (or until stop is closed).
func (e *Exec) waitBeyond(sinceSeq int, limit time.Duration, stop <-chan struct{}) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		e.mu.Lock()
		ready := len(e.chunks) > sinceSeq || e.finished
		changed := e.changed
		e.mu.Unlock()
		if ready {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-stop:
			return
		}
	}
}

func chunkEvent(sub uint64, id string, c chunk) reply {
	return reply{"event": "chunk", "sub": sub, "exec": id, "seq": c.seq, "stream": c.stream, "data": c.data}
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
	for subscriber, sub := range e.subscribers {
		subscriber.send(reply{"event": "exit", "sub": sub, "exec": e.id, "status": status})
	}
	e.subscribers = map[*conn]uint64{}
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
		"last_seq": len(e.chunks), "dropped_bytes": e.dropped,
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

// output answers chunks after sinceSeq, at most maxBytes of them (but always one, if any).
func (e *Exec) output(sinceSeq, maxBytes int) reply {
	if maxBytes <= 0 {
		maxBytes = defaultOutput
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var list []reply
	size := 0
	for i := sinceSeq; i >= 0 && i < len(e.chunks); i++ {
		c := e.chunks[i]
		if len(list) > 0 && size+len(c.data) > maxBytes {
			break
		}
		list = append(list, reply{"seq": c.seq, "stream": c.stream, "data": c.data})
		size += len(c.data)
	}
	r := e.statusLocked()
	if list == nil {
		list = []reply{}
	}
	r["chunks"] = list
	return r
}

// head is the first `limit` bytes of each stream, for a foreground run's answer.
func (e *Exec) head(limit int) (stdout, stderr []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.chunks {
		if c.stream == "stdout" && len(stdout) < limit {
			stdout = append(stdout, c.data[:minInt(len(c.data), limit-len(stdout))]...)
		} else if c.stream == "stderr" && len(stderr) < limit {
			stderr = append(stderr, c.data[:minInt(len(c.data), limit-len(stderr))]...)
		}
	}
	return stdout, stderr
}

func (e *Exec) subscribe(c *conn, sub uint64, sinceSeq int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := sinceSeq; i >= 0 && i < len(e.chunks); i++ {
		c.send(chunkEvent(sub, e.id, e.chunks[i]))
	}
	if e.finished {
		c.send(reply{"event": "exit", "sub": sub, "exec": e.id, "status": e.statusLocked()})
		return
	}
	e.subscribers[c] = sub
}

func (e *Exec) unsubscribe(c *conn) {
	e.mu.Lock()
	delete(e.subscribers, c)
	e.mu.Unlock()
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

// --- processes ---------------------------------------------------------------------------------

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
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
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

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return pathErr.Path + ": " + pathErr.Err.Error()
	}
	return err.Error()
}
