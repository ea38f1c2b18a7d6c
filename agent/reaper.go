package main

import (
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// The daemon reaps its children itself, from one goroutine woken by SIGCHLD, instead of
// one blocked wait4 (one OS thread) per child. Threads count against the sandbox's pids
// limit like processes do: a fork bomb that fills the limit must not leave the Go runtime
// unable to start the thread it needs, which would end the agent and every session in it.

var reaper = struct {
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
	early   map[int]syscall.WaitStatus // children that ended before anyone waited
}{waiting: map[int]chan syscall.WaitStatus{}, early: map[int]syscall.WaitStatus{}}

func startReaper() {
	signals := make(chan os.Signal, 64)
	signal.Notify(signals, syscall.SIGCHLD)
	go func() {
		tick := time.NewTicker(time.Second) // a safety net for coalesced signals
		for {
			select {
			case <-signals:
			case <-tick.C:
			}
			reapAll()
		}
	}()
}

func reapAll() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		reaper.mu.Lock()
		if waiter, ok := reaper.waiting[pid]; ok {
			delete(reaper.waiting, pid)
			waiter <- status
		} else {
			reaper.early[pid] = status
		}
		reaper.mu.Unlock()
	}
}

// waitPid waits for a child of the daemon to end and gives its status.
func waitPid(pid int) syscall.WaitStatus {
	reaper.mu.Lock()
	if status, ok := reaper.early[pid]; ok {
		delete(reaper.early, pid)
		reaper.mu.Unlock()
		return status
	}
	waiter := make(chan syscall.WaitStatus, 1)
	reaper.waiting[pid] = waiter
	reaper.mu.Unlock()
	return <-waiter
}

// warmThreads makes the runtime start n OS threads now and keep them idle for later, so
// that it rarely has to start one while the sandbox may be out of pids.
func warmThreads(n int) {
	var locked, release sync.WaitGroup
	locked.Add(n)
	release.Add(1)
	for i := 0; i < n; i++ {
		go func() {
			runtime.LockOSThread()
			locked.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	release.Done()
}
