// boxyard-agent runs inside a sandbox, as the sandbox user, and keeps what must outlive any
// one Boxyard process: shell sessions, background and managed processes, and their output.
//
//	boxyard-agent serve    the daemon; it listens on a unix socket in the sandbox's /tmp
//	boxyard-agent bridge   joins stdin and stdout to the daemon, starting it if needed
//	boxyard-agent oneshot TIMEOUT CWD argv|shell CMD...
//	                       runs one command in the exec's own stdio, outside any session
//	                       (for a sandbox that runs one command and is closed: compute mode)
//
// Boxyard starts one bridge per (Boxyard process, sandbox) with the engine's exec and keeps it
// open, so a command costs a write on an open stream instead of a new exec in the engine.
// The protocol is one JSON object per line in each direction (see protocol.go).
//
// The agent uses only Go's standard library and is linked statically, so it runs in any
// Linux image, from busybox to a full distribution.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// The protocol's version, answered to ping: 2 added fresh runs (outside any session).
const version = "2"

var (
	stateDir   = "/tmp/.boxyard"
	socketPath = filepath.Join(stateDir, "agent.sock")
)

func main() {
	if dir := os.Getenv("BOXYARD_AGENT_DIR"); dir != "" {
		stateDir = dir
		socketPath = filepath.Join(stateDir, "agent.sock")
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: boxyard-agent serve|bridge|version")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(serve())
	case "bridge":
		os.Exit(bridge())
	case "oneshot":
		os.Exit(oneshot(os.Args[2:]))
	case "version":
		fmt.Println(version)
	default:
		fmt.Fprintf(os.Stderr, "boxyard-agent: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

// bridge copies stdin to the daemon and the daemon's answers to stdout until either side ends.
func bridge() int {
	warmThreads(4)
	conn, err := dial()
	if err != nil {
		if err := startDaemon(); err != nil {
			fmt.Fprintf(os.Stderr, "boxyard-agent: cannot start the daemon: %v\n", err)
			return 1
		}
		for i := 0; i < 500; i++ {
			if conn, err = dial(); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "boxyard-agent: the daemon does not answer: %v\n", err)
			return 1
		}
	}
	go func() {
		io.Copy(conn, os.Stdin)
		conn.CloseWrite()
	}()
	io.Copy(os.Stdout, conn)
	return 0
}

// oneshot runs one command with the exec's own stdio, in a process group of its own, and
// kills its whole tree when the timeout passes; it exits with the command's status.
func oneshot(args []string) int {
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: boxyard-agent oneshot TIMEOUT CWD argv|shell CMD...")
		return 2
	}
	timeout, err := strconv.ParseFloat(args[0], 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "boxyard: bad timeout %q\n", args[0])
		return 2
	}
	cwd, mode, argv := args[1], args[2], args[3:]
	if info, err := os.Stat(cwd); err != nil || !info.IsDir() {
		fmt.Fprintf(os.Stderr, "boxyard: cwd %s is not a directory\n", cwd)
		return 210
	}
	if mode == "shell" {
		shell, _ := findShell()
		argv = []string{shell, "-c", argv[0]}
	}
	env := os.Environ()
	path, err := lookPath(argv[0], env, cwd)
	if err != nil {
		fmt.Fprintf(os.Stderr, "boxyard: %v\n", err)
		return 127
	}
	id := fmt.Sprintf("oneshot-%d", os.Getpid())
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Dir:   cwd,
		Env:   overlay(env, map[string]string{execMarker: id}),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "boxyard: %s\n", errorText(err))
		return 126
	}
	var timer *time.Timer
	killed := make(chan struct{})
	if timeout > 0 {
		timer = time.AfterFunc(time.Duration(timeout*float64(time.Second)), func() {
			killTree(proc.Pid, syscall.SIGKILL, id)
			close(killed)
		})
	}
	state, err := proc.Wait()
	if timer != nil && !timer.Stop() {
		// The timeout fired: the command ended because it was killed. Finish the killing
		// before exiting (this process's end would cut it short), then sweep once more for
		// what was being forked meanwhile.
		<-killed
		for _, straggler := range marked(id) { // by marker only: the pid itself is reaped
			syscall.Kill(straggler, syscall.SIGKILL)
		}
	}
	if err != nil {
		return 1
	}
	return exitStatus(state.Sys().(syscall.WaitStatus))
}

func dial() (*net.UnixConn, error) {
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: socketPath, Net: "unix"})
}

// startDaemon starts `serve` in a session of its own, detached from the bridge's exec, so it
// lives on when the bridge (and the Boxyard process behind it) goes away.
func startDaemon() error {
	if err := ensureStateDir(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	logFile, err := os.OpenFile(filepath.Join(stateDir, "agent.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	proc, err := os.StartProcess(self, []string{"boxyard-agent", "serve"}, &os.ProcAttr{
		Dir:   "/",
		Env:   os.Environ(),
		Files: []*os.File{null, logFile, logFile},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return err
	}
	return proc.Release()
}

func ensureStateDir() error {
	for _, dir := range []string{stateDir, filepath.Join(stateDir, "s"), filepath.Join(stateDir, "x")} {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

func serve() int {
	if err := ensureStateDir(); err != nil {
		fmt.Fprintf(os.Stderr, "boxyard-agent: %v\n", err)
		return 1
	}
	// One daemon per sandbox: a second one (two bridges racing to start it) leaves quietly.
	lock, err := os.OpenFile(filepath.Join(stateDir, "agent.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "boxyard-agent: %v\n", err)
		return 1
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return 0
	}
	os.Remove(socketPath)
	listener, err := net.ListenUnix("unix", &net.UnixAddr{Name: socketPath, Net: "unix"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "boxyard-agent: %v\n", err)
		return 1
	}
	os.Chmod(socketPath, 0o600)
	startReaper()
	warmThreads(8)
	agent := newAgent()
	for {
		conn, err := listener.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return 1
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go agent.serveConn(conn)
	}
}
