package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

var terminalID = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,80}$`)

// terminal runs a program on the exec's pseudo-terminal (the engine made it) as the sandbox
// user, with a tag of its own, and waits for it. Whatever the program started ends with the
// terminal: when the program exits, when the terminal hangs up (the admin's websocket
// closed), or when Boxyard asks the daemon to end it (`terminal.end`, which finds the tag by
// the terminal's id). It runs as root, from a root exec; it exits with the program's status.
func terminal(args []string) int {
	if len(args) < 3 || args[1] != "--" || !terminalID.MatchString(args[0]) {
		fmt.Fprintln(os.Stderr, "usage: boxyard-agent terminal ID -- ARGV...")
		return 2
	}
	id, argv := args[0], args[2:]
	if err := loadSandboxUser(); err != nil {
		fmt.Fprintf(os.Stderr, "boxyard: %v\n", err)
		return 1
	}
	tag := uint32(terminalTagBase + os.Getpid())
	record := filepath.Join(stateDir, "t", id)
	if err := writeReadable(record, []byte(strconv.FormatUint(uint64(tag), 10))); err != nil {
		fmt.Fprintf(os.Stderr, "boxyard: %v\n", err)
		return 1
	}
	defer os.Remove(record)
	path, err := lookPathAsSandbox(argv[0], os.Environ(), "/workspace")
	if err != nil {
		fmt.Fprintf(os.Stderr, "boxyard: %v\n", err)
		return 127
	}
	// The terminal is this process's (the engine made it our controlling terminal): the
	// program gets a process group of its own in the terminal's foreground, for job control.
	// A hangup (the terminal closed) is ours to act on, not to die of.
	hangups := make(chan os.Signal, 1)
	signal.Notify(hangups, syscall.SIGHUP)
	proc, err := startForSandbox(path, argv, &os.ProcAttr{
		Dir:   "/workspace",
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys: &syscall.SysProcAttr{
			Setpgid: true, Foreground: true, Ctty: 0, Credential: sandboxCredential(tag),
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "boxyard: %s\n", errorText(err))
		return 126
	}
	go func() {
		<-hangups
		killTag(tag, syscall.SIGKILL)
	}()
	go func() {
		waitForHangup(0)
		killTag(tag, syscall.SIGKILL)
	}()
	state, err := proc.Wait()
	killTag(tag, syscall.SIGKILL)
	if err != nil {
		return 1
	}
	return exitStatus(state.Sys().(syscall.WaitStatus))
}

// endTerminal kills what a terminal runs, found by the terminal's id.
func endTerminal(id string) (int, error) {
	if !terminalID.MatchString(id) {
		return 0, fail("bad_request", "invalid terminal id")
	}
	data, err := os.ReadFile(filepath.Join(stateDir, "t", id))
	if err != nil {
		return 0, nil // it has ended already
	}
	tag, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32)
	if err != nil || tag < terminalTagBase || tag >= tagCeiling {
		return 0, nil
	}
	return killTag(uint32(tag), syscall.SIGKILL), nil
}

// loadSandboxUser reads the sandbox user the daemon was started for.
func loadSandboxUser() error {
	data, err := os.ReadFile(filepath.Join(stateDir, "user"))
	if err != nil {
		return fmt.Errorf("the agent's daemon has not said who the sandbox user is: %v", err)
	}
	uid, gid, _ := strings.Cut(strings.TrimSpace(string(data)), ":")
	u, err1 := strconv.ParseUint(uid, 10, 32)
	g, err2 := strconv.ParseUint(gid, 10, 32)
	if err1 != nil || err2 != nil || u == 0 {
		return fmt.Errorf("bad sandbox user %q", data)
	}
	sandboxUser.uid, sandboxUser.gid = uint32(u), uint32(g)
	return nil
}

// waitForHangup blocks until the terminal on fd hangs up, without reading from it (what is
// typed belongs to the program).
func waitForHangup(fd int) {
	type pollFd struct {
		fd      int32
		events  int16
		revents int16
	}
	const hangup = 0x10 | 0x8 | 0x20 // POLLHUP | POLLERR | POLLNVAL, reported whatever is asked
	for {
		entry := pollFd{fd: int32(fd)}
		_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&entry)), 1, 0, 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 || entry.revents&hangup != 0 {
			return
		}
	}
}
