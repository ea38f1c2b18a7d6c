// boxyard-agent runs inside a sandbox and keeps what must outlive any one Boxyard process:
// shell sessions, background and managed processes, and their output. It is the container's
// main process, as root with only the capabilities to act on the sandbox user's processes;
// everything it starts runs as the sandbox user (see contain.go).
//
//	boxyard-agent serve --user UID:GID [--output-bytes N]
//	                                     the daemon; it listens on a unix socket on a
//	                                     root-only tmpfs, and keeps at most N bytes of its
//	                                     commands' output in all (budget.go)
//	boxyard-agent bridge                 joins stdin and stdout to the daemon (root)
//	boxyard-agent terminal ID -- ARGV... a program on the exec's terminal, as the sandbox user,
//	                                     whose processes all end with the terminal (root)
//	boxyard-agent list PATH 0|1 MAX      a directory's entries as JSON lines (sandbox user)
//	boxyard-agent archive PATH FORMAT    a directory as tar, tar.gz or zip on stdout (sandbox user)
//	boxyard-agent extract PATH FORMAT MAX_ENTRIES MAX_BYTES
//	                                     an archive from stdin into a directory (sandbox user)
//	boxyard-agent put PATH MODE OVERWRITE SIZE
//	boxyard-agent get PATH START LENGTH [IDENTITY]
//	                                     a file from stdin, or to stdout (sandbox user; the
//	                                     daemon starts them on a connection of its socket)
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

// The protocol's version, answered to ping: 2 added fresh runs (outside any session);
// 3 runs as root over the sandbox user (tags, reset, oom_killed, statfs, terminal.end);
// 4 moves files over a connection of their own ("file": put and get); 5 lets a run subscribe
// its own connection to its output ("watch"); 6 runs code in contexts (kernel.go).
const version = "6"

var (
	stateDir   = "/.boxyard-run"
	socketPath = filepath.Join(stateDir, "agent.sock")
)

func main() {
	if dir := os.Getenv("BOXYARD_AGENT_DIR"); dir != "" {
		stateDir = dir
		socketPath = filepath.Join(stateDir, "agent.sock")
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: boxyard-agent serve|bridge|terminal|list|archive|extract|put|get|version")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(serve(os.Args[2:]))
	case "bridge":
		os.Exit(bridge())
	case "terminal":
		os.Exit(terminal(os.Args[2:]))
	case "list":
		os.Exit(list(os.Args[2:]))
	case "archive":
		os.Exit(archive(os.Args[2:]))
	case "extract":
		os.Exit(extract(os.Args[2:]))
	case "put":
		os.Exit(put(os.Args[2:]))
	case "get":
		os.Exit(get(os.Args[2:]))
	case "version":
		fmt.Println(version)
	default:
		fmt.Fprintf(os.Stderr, "boxyard-agent: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

// bridge copies stdin to the daemon and the daemon's answers to stdout until either side ends.
// The daemon starts with the container: a bridge opened at the same moment waits for it.
func bridge() int {
	warmThreads(4)
	var conn *net.UnixConn
	var err error
	for i := 0; i < 1000; i++ {
		if conn, err = dial(); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "boxyard-agent: the daemon does not answer: %v\n", err)
		return 1
	}
	go func() {
		io.Copy(conn, os.Stdin)
		conn.CloseWrite()
	}()
	io.Copy(os.Stdout, conn)
	return 0
}

func dial() (*net.UnixConn, error) {
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: socketPath, Net: "unix"})
}

// ensureStateDir makes the agent's directories on its tmpfs: root's, and only searchable by
// others (the shell finds its session's files and command fifos in them by name).
func ensureStateDir() error {
	dirs := []string{stateDir, filepath.Join(stateDir, "s"), filepath.Join(stateDir, "x"), filepath.Join(stateDir, "t")}
	for _, dir := range dirs {
		if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if info, err := os.Lstat(dir); err != nil || !info.IsDir() || info.Sys().(*syscall.Stat_t).Uid != 0 {
			return fmt.Errorf("%s is not a directory of root's", dir)
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return err
		}
	}
	return nil
}

func serve(args []string) int {
	syscall.Umask(0o022)
	user, outputBytes, err := serveArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "boxyard-agent: %v\nusage: boxyard-agent serve --user UID:GID [--output-bytes N]\n", err)
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "boxyard-agent: serve runs as root, over the sandbox user's processes")
		return 1
	}
	if err := setSandboxUser(user); err != nil {
		fmt.Fprintf(os.Stderr, "boxyard-agent: %v\n", err)
		return 2
	}
	if err := ensureStateDir(); err != nil {
		fmt.Fprintf(os.Stderr, "boxyard-agent: %v\n", err)
		return 1
	}
	if err := writeReadable(filepath.Join(stateDir, "user"), []byte(user)); err != nil {
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
	agent := newAgent(outputBytes)
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

// serveArgs reads `--user UID:GID [--output-bytes N]`.
func serveArgs(args []string) (user string, outputBytes int, err error) {
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--user":
			user = args[i+1]
		case "--output-bytes":
			if outputBytes, err = strconv.Atoi(args[i+1]); err != nil || outputBytes <= 0 {
				return "", 0, fmt.Errorf("--output-bytes must be a positive number, not %q", args[i+1])
			}
		default:
			return "", 0, fmt.Errorf("unknown option %q", args[i])
		}
	}
	if user == "" || len(args)%2 != 0 {
		return "", 0, errors.New("serve needs --user UID:GID")
	}
	return user, outputBytes, nil
}
