package main

// The output budget: what the agent keeps of all its execs' output together (running ones and
// finished ones not yet let go), so that no amount of output can grow the agent past it. The
// agent's memory counts against the sandbox's memory limit; without a bound, many commands
// printing at once would have the kernel kill the agent, and every session with it.
//
// Past the budget the oldest kept chunks go first, whichever exec they belong to; an exec
// counts what it lost (evicted) and its chunks keep their numbers, so a reader sees the gap.
// Each chunk costs its bytes and chunkCost more (its record), so a flood of tiny chunks is
// bounded too.

import "sync"

const (
	defaultBudget = 32 << 20 // output kept in all unless `serve --output-bytes` says otherwise
	chunkCost     = 96       // what a kept chunk costs beyond its bytes: its record and its place in line
)

type budget struct {
	mu    sync.Mutex
	limit int
	used  int
	line  []heldChunk // kept chunks, oldest first (from `next` on)
	next  int
	stale int // entries of execs let go, still in line
}

type heldChunk struct {
	exec *Exec
	seq  int
}

func newBudget(limit int) *budget {
	if limit <= 0 {
		limit = defaultBudget
	}
	return &budget{limit: limit}
}

// add keeps a chunk of data for e within the budget: it drops the oldest kept chunks to make
// room, and cuts data itself if even that is not enough. The chunk is numbered and handed to
// e's subscribers under the budget's lock, so the line is in each exec's order and the chunk
// dropped is always its exec's oldest. Lock order: budget, then exec.
func (b *budget) add(e *Exec, stream string, data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.used+len(data)+chunkCost > b.limit && b.next < len(b.line) {
		b.evictOldest()
	}
	if room := b.limit - b.used - chunkCost; len(data) > room {
		room = maxInt(room, 0)
		e.mu.Lock()
		e.dropped += len(data) - room
		e.mu.Unlock()
		data = data[:room]
	}
	if len(data) == 0 {
		return
	}
	seq := e.keep1(stream, data)
	b.used += len(data) + chunkCost
	b.line = append(b.line, heldChunk{e, seq})
}

func (b *budget) evictOldest() {
	h := b.line[b.next]
	b.line[b.next] = heldChunk{}
	b.next++
	if size, ok := h.exec.evictFirst(h.seq); ok {
		b.used -= size + chunkCost
	} else {
		b.stale--
	}
	b.compact()
}

// release gives back what a let-go exec still holds; its entries in line are skipped.
func (b *budget) release(e *Exec) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	chunks, size := e.forget()
	b.used -= size + chunks*chunkCost
	b.stale += chunks
	b.compact()
}

// compact drops the line's spent and stale entries once they are half of it.
func (b *budget) compact() {
	if b.next+b.stale < 1024 || (b.next+b.stale)*2 < len(b.line) {
		return
	}
	live := make([]heldChunk, 0, len(b.line)-b.next-b.stale)
	for _, h := range b.line[b.next:] {
		if h.exec.holds(h.seq) {
			live = append(live, h)
		}
	}
	b.line, b.next, b.stale = live, 0, 0
}

func (b *budget) inUse() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
