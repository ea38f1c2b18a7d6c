package main

// The protocol: one JSON object per line.
//
// A request is {"id": N, "op": "...", ...}; its answer is {"id": N, "ok": true, ...} or
// {"id": N, "ok": false, "code": "...", "error": "..."}. Answers may come out of order (a
// foreground run answers when it ends). Subscriptions push {"event": "chunk"|"exit", "sub": N,
// ...} where N is the id of the subscribe request (or of a run sent with "watch": its output
// is pushed as it comes, before the run's answer). Output bytes travel as base64 ("data").
//
// Ops: ping; session.ensure, session.list, session.delete; run; status; output; wait; kill;
// stdin; subscribe, unsubscribe; process.start, process.list, process.restart, process.stop;
// reset; statfs; terminal.end; code.run, context.create, context.list, context.restart,
// context.delete (kernel.go). A connection whose first request is "file" carries one file
// and nothing else (files.go, serveFile).

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"time"
)

type request struct {
	ID         uint64            `json:"id"`
	Op         string            `json:"op"`
	Exec       string            `json:"exec,omitempty"`
	Session    string            `json:"session,omitempty"`
	Shell      *string           `json:"shell,omitempty"`
	Argv       []string          `json:"argv,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Init       *sessionInit      `json:"init,omitempty"`
	Timeout    float64           `json:"timeout,omitempty"`
	Background bool              `json:"background,omitempty"`
	Fresh      bool              `json:"fresh,omitempty"`
	Stdin      bool              `json:"stdin,omitempty"`
	Limit      int               `json:"limit,omitempty"`
	Keep       int               `json:"keep,omitempty"`
	SinceSeq   int               `json:"since_seq,omitempty"`
	MaxBytes   int               `json:"max_bytes,omitempty"`
	Data       []byte            `json:"data,omitempty"`
	EOF        bool              `json:"eof,omitempty"`
	Signal     string            `json:"signal,omitempty"`
	Name       string            `json:"name,omitempty"`
	Restart    bool              `json:"restart,omitempty"`
	Watch      bool              `json:"watch,omitempty"`
	Sub        uint64            `json:"sub,omitempty"`
	Context    string            `json:"context,omitempty"`
	Language   string            `json:"language,omitempty"`
	Code       string            `json:"code,omitempty"`
}

type sessionInit struct {
	Cwd string            `json:"cwd"`
	Env map[string]string `json:"env"`
}

type reply map[string]any

// failure is an error with a code the client maps to its own errors.
type failure struct {
	code    string
	message string
}

func (f *failure) Error() string { return f.message }

func fail(code, message string) error { return &failure{code, message} }

const (
	maxLine      = 64 << 20
	outboxLength = 4096
)

// conn is one client (one bridge). Everything it is sent goes through its outbox, written by
// one goroutine, so a slow client never blocks a process's output; one that falls too far
// behind is dropped.
type conn struct {
	agent  *Agent
	sock   *net.UnixConn
	outbox chan []byte
	done   chan struct{}
	once   sync.Once
}

func (a *Agent) serveConn(sock *net.UnixConn) {
	reader := bufio.NewReaderSize(sock, 64<<10)
	line, err := readLine(reader)
	if err != nil {
		sock.Close()
		return
	}
	var first request
	if json.Unmarshal(line, &first) == nil && first.Op == "file" {
		serveFile(sock, reader, &first) // the connection is the file's alone
		return
	}
	c := &conn{agent: a, sock: sock, outbox: make(chan []byte, outboxLength), done: make(chan struct{})}
	go c.writeLoop()
	defer c.close()
	for {
		var req request
		if err := json.Unmarshal(line, &req); err != nil {
			c.send(reply{"id": 0, "ok": false, "code": "bad_request", "error": "not a JSON request: " + err.Error()})
		} else {
			a.dispatch(c, &req)
		}
		if line, err = readLine(reader); err != nil {
			return
		}
	}
}

func readLine(reader *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := reader.ReadSlice('\n')
		line = append(line, part...)
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
		if len(line) > maxLine {
			return nil, errors.New("line too long")
		}
	}
}

func (c *conn) writeLoop() {
	for {
		select {
		case msg := <-c.outbox:
			c.sock.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.sock.Write(msg); err != nil {
				c.close()
				return
			}
		case <-c.done:
			return
		}
	}
}

func (c *conn) send(msg reply) {
	data, err := json.Marshal(msg)
	if err != nil {
		data, _ = json.Marshal(reply{"id": msg["id"], "ok": false, "code": "internal", "error": err.Error()})
	}
	data = append(data, '\n')
	select {
	case c.outbox <- data:
	case <-c.done:
	default:
		c.close() // hopelessly behind: drop it rather than stall everyone
	}
}

func (c *conn) close() {
	c.once.Do(func() {
		close(c.done)
		c.sock.Close()
		c.agent.unsubscribeAll(c)
	})
}

func (c *conn) answer(id uint64, result reply, err error) {
	if err != nil {
		code := "internal"
		var f *failure
		if errors.As(err, &f) {
			code = f.code
		}
		c.send(reply{"id": id, "ok": false, "code": code, "error": err.Error()})
		return
	}
	if result == nil {
		result = reply{}
	}
	result["id"] = id
	result["ok"] = true
	c.send(result)
}

// dispatch handles a request. Whatever decides order (queueing a run in its session, writing
// to a process's stdin) happens here, on the connection's reader, so requests keep the order
// they were sent in; only the waiting happens in goroutines.
func (a *Agent) dispatch(c *conn, req *request) {
	switch req.Op {
	case "ping":
		c.answer(req.ID, reply{"version": version}, nil)
	case "session.ensure":
		s, created, err := a.ensureSession(req.Session, req.Init)
		if err != nil {
			c.answer(req.ID, nil, err)
			return
		}
		info := s.info()
		info["created"] = created
		c.answer(req.ID, info, nil)
	case "session.list":
		c.answer(req.ID, reply{"sessions": a.listSessions()}, nil)
	case "session.delete":
		c.answer(req.ID, nil, a.deleteSession(req.Session))
	case "run":
		a.run(c, req)
	case "status":
		e, err := a.lookup(req.Exec)
		if err != nil {
			c.answer(req.ID, nil, err)
			return
		}
		c.answer(req.ID, statusWithHead(e, req.Limit), nil)
	case "output":
		e, err := a.lookup(req.Exec)
		if err != nil {
			c.answer(req.ID, nil, err)
			return
		}
		if req.Timeout <= 0 {
			c.answer(req.ID, e.output(req.SinceSeq, req.MaxBytes), nil)
			return
		}
		// A long poll: answer as soon as there is something new (or the exec ends).
		go func() {
			e.waitBeyond(req.SinceSeq, time.Duration(req.Timeout*float64(time.Second)), c.done)
			c.answer(req.ID, e.output(req.SinceSeq, req.MaxBytes), nil)
		}()
	case "wait":
		e, err := a.lookup(req.Exec)
		if err != nil {
			c.answer(req.ID, nil, err)
			return
		}
		go func() {
			timer := time.NewTimer(time.Duration(req.Timeout * float64(time.Second)))
			defer timer.Stop()
			select {
			case <-e.done:
			case <-timer.C:
			case <-c.done:
				return
			}
			c.answer(req.ID, statusWithHead(e, req.Limit), nil)
		}()
	case "kill":
		e, err := a.lookup(req.Exec)
		if err != nil {
			c.answer(req.ID, nil, err)
			return
		}
		e.kill(req.Signal)
		c.answer(req.ID, e.status(), nil)
	case "stdin":
		e, err := a.lookup(req.Exec)
		if err != nil {
			c.answer(req.ID, nil, err)
			return
		}
		e.writeStdin(req.Data, req.EOF, func(err error) { c.answer(req.ID, nil, err) })
	case "subscribe":
		e, err := a.lookup(req.Exec)
		if err != nil {
			c.answer(req.ID, nil, err)
			return
		}
		c.answer(req.ID, nil, nil)
		e.subscribe(c, req.ID, req.SinceSeq)
	case "unsubscribe":
		if e, err := a.lookup(req.Exec); err == nil {
			e.unsubscribe(c, req.Sub)
		}
		c.answer(req.ID, nil, nil)
	case "process.start":
		info, err := a.startProcess(req)
		c.answer(req.ID, info, err)
	case "process.list":
		c.answer(req.ID, reply{"processes": a.listProcesses()}, nil)
	case "process.restart":
		if _, err := a.stopProcess(req.Name); err != nil {
			c.answer(req.ID, nil, err)
			return
		}
		a.mu.Lock()
		p := a.processes[req.Name]
		a.mu.Unlock()
		spec := p.req
		if req.Shell != nil || len(req.Argv) > 0 {
			spec = *req // restarted with the definition as it is now
		}
		info, err := a.startProcess(&spec)
		c.answer(req.ID, info, err)
	case "process.stop":
		info, err := a.stopProcess(req.Name)
		c.answer(req.ID, info, err)
	case "reset":
		c.answer(req.ID, reply{"killed": a.reset()}, nil)
	case "statfs":
		usage, err := workspaceUsage()
		c.answer(req.ID, usage, err)
	case "code.run":
		a.runCode(c, req)
	case "context.create":
		k, err := a.createContext(req)
		if err != nil {
			c.answer(req.ID, nil, err)
			return
		}
		c.answer(req.ID, k.info(), nil)
	case "context.list":
		c.answer(req.ID, reply{"contexts": a.listContexts()}, nil)
	case "context.restart":
		info, err := a.restartContext(req.Context)
		c.answer(req.ID, info, err)
	case "context.delete":
		c.answer(req.ID, nil, a.deleteContext(req.Context))
	case "terminal.end":
		killed, err := endTerminal(req.Exec)
		c.answer(req.ID, reply{"killed": killed}, err)
	default:
		c.answer(req.ID, nil, fail("bad_request", "unknown op "+req.Op))
	}
}

// statusWithHead is an exec's status, with the first `limit` bytes of each stream if asked.
func statusWithHead(e *Exec, limit int) reply {
	r := e.status()
	if limit > 0 {
		r["stdout"], r["stderr"] = e.head(limit)
	}
	return r
}
