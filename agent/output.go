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
	e.bytes[stream] += len(data)
	room := e.keep - e.keptBytes
	if stream == "stderr" && e.keptStderr < stderrReserve {
		// A flood on stdout does not hide what the command says on stderr (its last words).
		room = maxInt(room, stderrReserve-e.keptStderr)
	}
	room = maxInt(room, 0)
	if len(data) > room {
		e.dropped += len(data) - room
		data = data[:room]
	}
	// Counted against the exec's own cap now, so its two streams never both take the same room.
	e.keptBytes += len(data)
	if stream == "stderr" {
		e.keptStderr += len(data)
	}
	b := e.budget
	e.mu.Unlock()
	if len(data) == 0 {
		return
	}
	if b == nil {
		e.keep1(stream, data)
		return
	}
	b.add(e, stream, data) // within the sandbox's budget for all output
}

// keep1 keeps a chunk (a copy of data), numbers it and hands it to the subscribers.
func (e *Exec) keep1(stream string, data []byte) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lastSeq++
	c := chunk{seq: e.lastSeq, stream: stream, data: append([]byte(nil), data...)}
	e.chunks = append(e.chunks, c)
	e.held += len(c.data)
	for s := range e.subscribers {
		s.conn.send(chunkEvent(s.id, e.id, c))
	}
	e.signalLocked()
	return c.seq
}

// evictFirst drops the exec's oldest kept chunk, if it is chunk seq (the budget's oldest);
// its bytes are counted as dropped. It answers the chunk's size.
func (e *Exec) evictFirst(seq int) (int, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.chunks) == 0 || e.chunks[0].seq != seq {
		return 0, false
	}
	size := len(e.chunks[0].data)
	e.chunks[0] = chunk{}
	e.chunks = e.chunks[1:]
	e.held -= size
	e.evicted += size
	return size, true
}

// forget lets go of every kept chunk (the agent lets the exec go): how many, and their bytes.
func (e *Exec) forget() (chunks, size int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	chunks, size = len(e.chunks), e.held
	e.chunks, e.held = nil, 0
	return chunks, size
}

func (e *Exec) holds(seq int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.index(seq) >= 0
}

// index is where chunk seq is in e.chunks, or -1 if it is not kept. Kept chunks are in order,
// numbered without gaps from the first kept one.
func (e *Exec) index(seq int) int {
	if len(e.chunks) == 0 {
		return -1
	}
	i := seq - e.chunks[0].seq
	if i < 0 || i >= len(e.chunks) {
		return -1
	}
	return i
}

// after is the index of the first kept chunk after sinceSeq.
func (e *Exec) after(sinceSeq int) int {
	if len(e.chunks) == 0 {
		return 0
	}
	return maxInt(sinceSeq-e.chunks[0].seq+1, 0)
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
		ready := e.lastSeq > sinceSeq || e.finished
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
// Chunks the budget dropped are skipped: the first answered may come after a gap.
func (e *Exec) output(sinceSeq, maxBytes int) reply {
	if maxBytes <= 0 {
		maxBytes = defaultOutput
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var list []reply
	size := 0
	for i := e.after(sinceSeq); sinceSeq >= 0 && i < len(e.chunks); i++ {
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
	for i := e.after(sinceSeq); sinceSeq >= 0 && i < len(e.chunks); i++ {
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
