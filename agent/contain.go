package main

// Containment. The agent runs as root with three capabilities (kill, setuid, setgid) and
// nothing else; everything it starts for the sandbox runs as the sandbox user, which has no
// capabilities at all. So sandbox code cannot signal, trace or replace the agent, nor reach
// its socket and state, which live on a root-only tmpfs.
//
// Every process the agent starts carries one extra supplementary group: a number of its own,
// its "tag" (a command's, a session shell's, a managed process run's). Children inherit it
// through fork, exec, setsid, double forks and renames, and a process without CAP_SETGID
// cannot drop a supplementary group, so the tag finds every process a command left behind,
// whatever it did to hide. Killing a command kills its tag; a tag's processes never outlive
// their command's timeout; a reset kills every process of the sandbox user.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// Tags are group ids far above any image's own groups. Those the daemon hands out count
	// up from tagBase; a terminal's is terminalTagBase plus its own pid (unique while it
	// lives, and it kills its tag before it exits).
	tagBase         = 1_800_000_000
	terminalTagBase = 1_900_000_000
	tagCeiling      = 2_000_000_000
	// A kill pass finds the tag's processes and kills them; what was being forked meanwhile
	// is found by the next one. Killed processes cannot fork, so this ends within a few.
	killPasses  = 200
	killPatient = 5 * time.Second
)

var sandboxUser = struct{ uid, gid uint32 }{}

var tags = struct {
	sync.Mutex
	next uint32
}{}

// setSandboxUser parses "uid:gid" (or "uid") and seeds the tag counter above every tag
// already in use (an agent that started again finds its predecessor's processes).
func setSandboxUser(spec string) error {
	uidText, gidText, found := strings.Cut(spec, ":")
	if !found {
		gidText = uidText
	}
	uid, err1 := strconv.ParseUint(uidText, 10, 32)
	gid, err2 := strconv.ParseUint(gidText, 10, 32)
	if err1 != nil || err2 != nil || uid == 0 {
		return fmt.Errorf("the sandbox user must be a numeric, non-root uid:gid, not %q", spec)
	}
	sandboxUser.uid, sandboxUser.gid = uint32(uid), uint32(gid)
	tags.Lock()
	defer tags.Unlock()
	tags.next = tagBase
	for _, p := range scanProcesses() {
		for _, group := range p.groups {
			if group >= tags.next && group < terminalTagBase {
				tags.next = group + 1
			}
		}
	}
	return nil
}

func newTag() uint32 {
	tags.Lock()
	defer tags.Unlock()
	tags.next++
	if tags.next >= terminalTagBase {
		tags.next = tagBase + 1
	}
	return tags.next
}

// asSandbox is how the agent starts a process for the sandbox: as the sandbox user, with
// its tag, in a process group of its own.
func asSandbox(tag uint32) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: sandboxCredential(tag)}
}

// commandOOMScore is the out-of-memory killer's score adjustment of everything the agent
// starts: the highest there is. Within a sandbox's memory limit the kernel ends the process
// with the highest score, its share of the memory plus its adjustment, so every command
// (whose score is 1000 and more) is ended before the agent that keeps the sessions (whose
// score is its share, never 1000: its output is bounded by its budget), or the container's
// init and the engine's bridges, which keep the engine's default. The agent cannot go below
// that default (it has no CAP_SYS_RESOURCE), only the commands above it.
const commandOOMScore = 1000

// forkPatience is how long a start refused for want of room is tried again.
const forkPatience = 2 * time.Second

var starting sync.Mutex

// startForSandbox starts a process with the command's score. Go cannot set a child's score
// between fork and exec, and the agent may not lower a process of the sandbox user's, so the
// agent takes the score itself for the moment of the fork (children inherit it) and goes
// back to its own after it (a process may always return to the score it was started with);
// starts take turns.
func startForSandbox(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	starting.Lock()
	defer starting.Unlock()
	if own, err := readOOMScore(); err == nil && own < commandOOMScore {
		if err := writeOOMScore(commandOOMScore); err == nil {
			defer func() {
				if err := writeOOMScore(own); err != nil {
					fmt.Fprintf(os.Stderr, "boxyard-agent: restoring its oom score: %v\n", err)
				}
			}()
		}
	}
	// A fork refused for want of room (EAGAIN: the pids limit) is often the moment after a
	// kill, before the killed are reaped; it is tried again for a little while.
	deadline := time.Now().Add(forkPatience)
	for {
		proc, err := os.StartProcess(path, argv, attr)
		if err == nil || !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			return proc, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readOOMScore() (int, error) {
	text, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(text)))
}

func writeOOMScore(score int) error {
	return os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(score)), 0)
}

func sandboxCredential(tag uint32) *syscall.Credential {
	return &syscall.Credential{
		Uid: sandboxUser.uid, Gid: sandboxUser.gid, Groups: []uint32{sandboxUser.gid, tag},
	}
}

// checkAsSandbox runs a check of the file system (is this a directory, is that program
// there) with the sandbox user's file permissions, not root's: this OS thread alone takes
// the sandbox user's file-system identity for the duration.
func checkAsSandbox(check func()) {
	runtime.LockOSThread()
	setfsid(syscall.SYS_SETFSGID, int(sandboxUser.gid))
	setfsid(syscall.SYS_SETFSUID, int(sandboxUser.uid))
	check()
	setfsid(syscall.SYS_SETFSUID, 0)
	setfsid(syscall.SYS_SETFSGID, 0)
	// Only a thread that is root again goes back to the pool; otherwise it ends with us.
	if setfsid(syscall.SYS_SETFSUID, -1) == 0 && setfsid(syscall.SYS_SETFSGID, -1) == 0 {
		runtime.UnlockOSThread()
	}
}

// setfsid sets this thread's file-system uid or gid and answers the one it had; -1 only
// asks. (syscall.Setfsuid drops the answer.)
func setfsid(call uintptr, id int) int {
	previous, _, _ := syscall.RawSyscall(call, uintptr(id), 0, 0)
	return int(previous)
}

type processInfo struct {
	pid    int
	uid    int
	groups []uint32
}

// scanProcesses reads every live process's real uid and groups from /proc (zombies, which
// are dead already, are left out).
func scanProcesses() []processInfo {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	found := make([]processInfo, 0, len(entries))
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil || pid == self {
			continue
		}
		if info, ok := readStatus(pid); ok {
			found = append(found, info)
		}
	}
	return found
}

func readStatus(pid int) (processInfo, bool) {
	file, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return processInfo{}, false
	}
	defer file.Close()
	return parseStatus(pid, file)
}

func parseStatus(pid int, file interface{ Read([]byte) (int, error) }) (processInfo, bool) {
	info := processInfo{pid: pid, uid: -1}
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		line := scanner.Text()
		switch {
		case strings.HasPrefix(line, "State:"):
			if state := strings.Fields(line[6:]); len(state) > 0 && (state[0] == "Z" || state[0] == "X") {
				return info, false
			}
		case strings.HasPrefix(line, "Uid:"):
			if fields := strings.Fields(line[4:]); len(fields) > 0 {
				info.uid, _ = strconv.Atoi(fields[0])
			}
		case strings.HasPrefix(line, "Groups:"):
			for _, field := range strings.Fields(line[7:]) {
				if group, err := strconv.ParseUint(field, 10, 32); err == nil {
					info.groups = append(info.groups, uint32(group))
				}
			}
			return info, true // Groups comes after State and Uid
		}
	}
	return info, info.uid >= 0
}

func (p processInfo) tagged(tag uint32) bool {
	for _, group := range p.groups {
		if group == tag {
			return true
		}
	}
	return false
}

// members are the live processes carrying a tag, except those in `except`.
func members(tag uint32, except ...int) []int {
	var found []int
outer:
	for _, p := range scanProcesses() {
		if !p.tagged(tag) {
			continue
		}
		for _, pid := range except {
			if p.pid == pid {
				continue outer
			}
		}
		found = append(found, p.pid)
	}
	return found
}

// killTag signals every process of a tag. SIGKILL is repeated until none is left (what was
// forked during a pass is found by the next); other signals are sent once. It returns how
// many processes were signalled.
func killTag(tag uint32, sig syscall.Signal) int {
	if tag == 0 {
		return 0
	}
	return killWhere(func(p processInfo) bool { return p.tagged(tag) }, sig)
}

// killSandboxUser kills every process of the sandbox user: whatever it started, however.
func killSandboxUser() int {
	uid := int(sandboxUser.uid)
	return killWhere(func(p processInfo) bool { return p.uid == uid }, syscall.SIGKILL)
}

func killWhere(match func(processInfo) bool, sig syscall.Signal) int {
	signalled := map[int]bool{}
	started := time.Now()
	for pass := 0; pass < killPasses; pass++ {
		hit := 0
		for _, p := range scanProcesses() {
			if match(p) {
				if syscall.Kill(p.pid, sig) == nil {
					hit++
					signalled[p.pid] = true
				}
			}
		}
		if hit == 0 || sig != syscall.SIGKILL || time.Since(started) > killPatient {
			break
		}
		if pass > 2 {
			time.Sleep(time.Millisecond) // let the killed go, so the next pass sees fewer
		}
	}
	return len(signalled)
}

// oomKills is how many processes the kernel's out-of-memory killer has killed in this
// container so far (cgroup v1 or v2), or -1 if it does not say.
func oomKills() int {
	for _, path := range []string{"/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"} {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if fields := strings.Fields(line); len(fields) == 2 && fields[0] == "oom_kill" {
				if count, err := strconv.Atoi(fields[1]); err == nil {
					return count
				}
			}
		}
	}
	return -1
}

// isDirAsSandbox is whether the sandbox user can use path as a working directory.
func isDirAsSandbox(path string) (ok bool) {
	checkAsSandbox(func() {
		// "dir/." is found only through a directory the user may search.
		info, err := os.Stat(path + "/.")
		ok = err == nil && info.IsDir()
	})
	return ok
}

// workspaceUsage is the workspace's file system: its size and what is used of it, in bytes.
func workspaceUsage() (reply, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/workspace", &fs); err != nil {
		return nil, fail("internal", "statfs /workspace: "+err.Error())
	}
	size := int64(fs.Blocks) * fs.Bsize
	free := int64(fs.Bfree) * fs.Bsize
	return reply{"size_bytes": size, "used_bytes": size - free, "free_bytes": int64(fs.Bavail) * fs.Bsize,
		"inodes": fs.Files, "inodes_free": fs.Ffree}, nil
}
