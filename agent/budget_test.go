package main

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"
)

func registered(a *Agent, id string, keep int) *Exec {
	e := newExec(id, "default", true, keep)
	if err := a.register(e); err != nil {
		panic(err)
	}
	return e
}

// heldCost is what the execs' kept chunks cost, as the budget should count it.
func heldCost(execs ...*Exec) int {
	total := 0
	for _, e := range execs {
		e.mu.Lock()
		total += e.held + len(e.chunks)*chunkCost
		e.mu.Unlock()
	}
	return total
}

func TestBudgetDropsTheOldestOutputOfAnyExec(t *testing.T) {
	a := newAgent(4 * (1000 + chunkCost))
	first, second := registered(a, "a", 1<<20), registered(a, "b", 1<<20)
	block := func(b byte) []byte { return bytes.Repeat([]byte{b}, 1000) }
	first.append("stdout", block('1'))
	first.append("stdout", block('2'))
	second.append("stdout", block('3'))
	second.append("stdout", block('4'))
	if used := a.output.inUse(); used != 4*(1000+chunkCost) {
		t.Fatalf("within the budget nothing is dropped: %d in use", used)
	}
	second.append("stderr", block('5')) // the oldest kept chunk of all goes: first's seq 1
	second.append("stdout", block('6')) // then first's seq 2
	if used := a.output.inUse(); used != heldCost(first, second) || used > a.output.limit {
		t.Fatalf("in use %d, held %d, limit %d", used, heldCost(first, second), a.output.limit)
	}
	status := first.status()
	if status["dropped_bytes"] != 2000 || status["evicted_bytes"] != 2000 || status["last_seq"] != 2 {
		t.Fatalf("first: %v", status)
	}
	if chunks := first.output(0, 0)["chunks"].([]reply); len(chunks) != 0 {
		t.Fatalf("first still answers %d chunks", len(chunks))
	}
	status = second.status()
	if status["dropped_bytes"] != 0 || status["last_seq"] != 4 || status["stdout_bytes"] != 3000 {
		t.Fatalf("second: %v", status)
	}
	// Numbers are never reused: after one more drop, a reader from the start gets a gap.
	second.append("stdout", block('7'))
	chunks := second.output(0, 0)["chunks"].([]reply)
	if len(chunks) != 4 || chunks[0]["seq"] != 2 || chunks[3]["seq"] != 5 {
		t.Fatalf("second's chunks: %v", chunks)
	}
	if second.status()["dropped_bytes"] != 1000 {
		t.Fatalf("second: %v", second.status())
	}
	if got := second.output(3, 0)["chunks"].([]reply); len(got) != 2 || got[0]["seq"] != 4 {
		t.Fatalf("after seq 3: %v", got)
	}
}

func TestBudgetCountsTinyChunksAtTheirCost(t *testing.T) {
	a := newAgent(64 << 10)
	e := registered(a, "a", 16<<20)
	for i := 0; i < 100_000; i++ {
		e.append("stdout", []byte("x"))
	}
	e.mu.Lock()
	kept := len(e.chunks)
	e.mu.Unlock()
	if want := (64 << 10) / (1 + chunkCost); kept != want {
		t.Fatalf("kept %d one-byte chunks, want %d", kept, want)
	}
	if status := e.status(); status["dropped_bytes"] != 100_000-kept || status["last_seq"] != 100_000 {
		t.Fatalf("status: %v", status)
	}
}

func TestBudgetCutsAChunkLargerThanItself(t *testing.T) {
	a := newAgent(1000)
	e := registered(a, "a", 1<<20)
	e.append("stdout", bytes.Repeat([]byte("y"), 5000))
	stdout, _ := e.head(1 << 20)
	if len(stdout) != 1000-chunkCost || e.status()["dropped_bytes"] != 5000-len(stdout) {
		t.Fatalf("kept %d bytes: %v", len(stdout), e.status())
	}
}

func TestFinishedExecsLetGoGiveTheirOutputBack(t *testing.T) {
	a := newAgent(1 << 30)
	var execs []*Exec
	for i := 0; i < maxFinished+10; i++ {
		e := registered(a, fmt.Sprint(i), 1<<20)
		e.append("stdout", []byte("output"))
		e.finish(0, false, false, "", "") // register's watcher retires it
		execs = append(execs, e)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		a.mu.Lock()
		known, retired := len(a.execs), len(a.finishedOrder)
		a.mu.Unlock()
		if known == maxFinished && retired == maxFinished {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d execs known, %d retired", known, retired)
		}
	}
	if used, want := a.output.inUse(), heldCost(execs...); used != want || want != maxFinished*(6+chunkCost) {
		t.Fatalf("in use %d, held %d", used, want)
	}
}

func TestBudgetHoldsUnderConcurrentWriters(t *testing.T) {
	limit := 256 << 10
	a := newAgent(limit)
	var execs []*Exec
	var writers sync.WaitGroup
	for i := 0; i < 16; i++ {
		e := registered(a, fmt.Sprint(i), 16<<20)
		execs = append(execs, e)
		writers.Add(2)
		for _, stream := range []string{"stdout", "stderr"} {
			go func(stream string) {
				defer writers.Done()
				for j := 0; j < 200; j++ {
					e.append(stream, bytes.Repeat([]byte("z"), 1+j*37%4096))
				}
			}(stream)
		}
	}
	writers.Wait()
	if used := a.output.inUse(); used > limit || used != heldCost(execs...) {
		t.Fatalf("in use %d, held %d, limit %d", used, heldCost(execs...), limit)
	}
	for _, e := range execs {
		status := e.status()
		e.mu.Lock()
		held := e.held
		e.mu.Unlock()
		written := status["stdout_bytes"].(int) + status["stderr_bytes"].(int)
		if written != held+status["dropped_bytes"].(int) {
			t.Fatalf("%s: %d written, %d held, status %v", e.id, written, held, status)
		}
	}
}

func TestServeArgs(t *testing.T) {
	user, size, err := serveArgs([]string{"--user", "10001:10001", "--output-bytes", "4096"})
	if err != nil || user != "10001:10001" || size != 4096 {
		t.Fatalf("%q %d %v", user, size, err)
	}
	if user, size, err = serveArgs([]string{"--user", "5"}); err != nil || user != "5" || size != 0 {
		t.Fatalf("%q %d %v", user, size, err)
	}
	for _, bad := range [][]string{{}, {"--user"}, {"--output-bytes", "1"}, {"--user", "5", "--output-bytes", "-1"}, {"--user", "5", "--x", "1"}} {
		if _, _, err := serveArgs(bad); err == nil {
			t.Fatalf("%q was taken", bad)
		}
	}
}
