package main

// An exec's output: its numbered chunks, what is kept of them, and its subscribers.

import (
	"time"
)

const (
	defaultOutput = 64 << 10 // most bytes an `output` answer carries unless asked
	stderrReserve = 64 << 10 // stderr kept beyond the exec's cap, so a flood never hides it
)

type chunk struct {
	seq    int
	stream string
	data   []byte
}

// subscription is one subscriber of an exec: a connection, and the id its events carry (a
// connection may follow one exec more than once, for several readers).
type subscription struct {
	conn *conn
	id   uint64
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
	for s := range e.subscribers {
		s.conn.send(chunkEvent(s.id, e.id, c))
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
	e.subscribers[subscription{c, sub}] = true
}

// unsubscribe ends one subscription of the connection (sub), or all of them (sub 0).
func (e *Exec) unsubscribe(c *conn, sub uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for s := range e.subscribers {
		if s.conn == c && (sub == 0 || s.id == sub) {
			delete(e.subscribers, s)
		}
	}
}
