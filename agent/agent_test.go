package main

import (
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestParseExportsReadsBashAndBusyboxForms(t *testing.T) {
	bash := "declare -x HOME=\"/workspace\"\ndeclare -x QUOTED=\"a \\\"b\\\" \\$c \\\\ d\"\n" +
		"declare -x MULTI=\"one\ntwo\"\ndeclare -x NOVALUE\ndeclare -rx RO=\"r\"\n"
	want := []string{"HOME=/workspace", "QUOTED=a \"b\" $c \\ d", "MULTI=one\ntwo", "RO=r"}
	if got := parseExports(bash); !reflect.DeepEqual(got, want) {
		t.Fatalf("bash: got %q, want %q", got, want)
	}
	ash := "export HOME='/workspace'\nexport IT='it'\\''s'\nexport MULTI='one\ntwo'\nexport EMPTY=''\n"
	want = []string{"HOME=/workspace", "IT=it's", "MULTI=one\ntwo", "EMPTY="}
	if got := parseExports(ash); !reflect.DeepEqual(got, want) {
		t.Fatalf("busybox: got %q, want %q", got, want)
	}
}

func TestSaveStateRoundTripsThroughParseExports(t *testing.T) {
	env := []string{"A=plain", "B=it's \"quoted\" $x \\", "C=line\nbreak", "D="}
	s := &Session{dir: t.TempDir(), agent: &Agent{}}
	if err := s.saveState("/tmp", env); err != nil {
		t.Fatal(err)
	}
	cwd, got := s.current()
	if cwd != "/tmp" || !reflect.DeepEqual(got, env) {
		t.Fatalf("got %q %q, want /tmp %q", cwd, got, env)
	}
}

func TestIncompleteTailNeverSplitsACharacter(t *testing.T) {
	text := []byte("ab€") // € is three bytes
	for cut := 0; cut <= len(text); cut++ {
		held := incompleteTail(text[:cut])
		if cut == 3 || cut == 4 {
			if held != cut-2 {
				t.Fatalf("cut %d: held %d bytes, want %d", cut, held, cut-2)
			}
		} else if held != 0 {
			t.Fatalf("cut %d: held %d bytes of complete text", cut, held)
		}
	}
}

func TestOverlayReplacesAndAdds(t *testing.T) {
	got := overlay([]string{"A=1", "B=2"}, map[string]string{"B": "3", "C": "4"})
	want := []string{"A=1", "B=3", "C=4"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestOutputPagesByBytesAndNeverSkips(t *testing.T) {
	e := newExec("x", "default", true, 1<<20)
	for _, part := range []string{"aaaa", "bbbb", "cccc"} {
		e.append("stdout", []byte(part))
	}
	first := e.output(0, 6)["chunks"].([]reply)
	if len(first) != 1 || first[0]["seq"] != 1 {
		t.Fatalf("first page: %v", first)
	}
	rest := e.output(1, 100)["chunks"].([]reply)
	if len(rest) != 2 || rest[0]["seq"] != 2 || rest[1]["seq"] != 3 {
		t.Fatalf("second page: %v", rest)
	}
}

func TestKeepCapCountsWhatItDrops(t *testing.T) {
	e := newExec("x", "default", true, 5)
	e.append("stdout", []byte("1234"))
	e.append("stdout", []byte("5678"))
	e.append("stderr", []byte("9"))
	status := e.status()
	// stdout past the cap is counted and dropped; stderr has a reserve of its own past it.
	if status["dropped_bytes"] != 3 || status["stdout_bytes"] != 8 || status["last_seq"] != 3 {
		t.Fatalf("status: %v", status)
	}
	if _, stderr := e.head(10); string(stderr) != "9" {
		t.Fatalf("stderr past the cap: %q", stderr)
	}
}

// A command's last output can still sit in its pipe when its status arrives and the readers
// are told to stop (a read deadline in the past): what is left must be read, not dropped.
func TestSettleKeepsWhatThePipesStillHold(t *testing.T) {
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "o"), filepath.Join(dir, "e")}
	var pipes []*os.File
	for _, path := range paths {
		pipe, err := openFifo(path)
		if err != nil {
			t.Fatal(err)
		}
		pipes = append(pipes, pipe)
	}
	// Written before any reader runs, as a command's last words are written before its status.
	writers := make([]*os.File, 2)
	for i, path := range paths {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		writers[i] = w
		defer w.Close()
	}
	writers[0].Write([]byte("last words\n"))
	writers[1].Write([]byte("sh: can't fork\n"))
	e := newExec("x", "default", false, 1<<20)
	var readers sync.WaitGroup
	for _, pipe := range pipes {
		pipe.SetReadDeadline(time.Now()) // the readers are stopped before they read anything
	}
	readers.Add(2)
	go readInto(e, "stdout", pipes[0], &readers)
	go readInto(e, "stderr", pipes[1], &readers)
	settle(e, pipes, paths, &readers)
	stdout, stderr := e.head(1024)
	if string(stdout) != "last words\n" || string(stderr) != "sh: can't fork\n" {
		t.Fatalf("stdout %q, stderr %q", stdout, stderr)
	}
}
