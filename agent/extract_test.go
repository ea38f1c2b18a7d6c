package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func tarOf(t *testing.T, files map[string]string) []byte {
	var buffer bytes.Buffer
	out := tar.NewWriter(&buffer)
	for name, body := range files {
		header := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}
		if err := out.WriteHeader(header); err != nil {
			t.Fatal(err)
		}
		if _, err := out.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return buffer.Bytes()
}

func gzipOf(t *testing.T, data []byte) []byte {
	var buffer bytes.Buffer
	out := gzip.NewWriter(&buffer)
	if _, err := out.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return buffer.Bytes()
}

// extractTo extracts data into a new directory and says what was refused ("" when nothing).
func extractTo(t *testing.T, format string, data []byte) (string, string) {
	t.Helper()
	root := t.TempDir()
	err := extractInto(root, format, bytes.NewReader(data), 100, 1<<20)
	var refused *refusal
	if errors.As(err, &refused) {
		return root, refused.Entry + ": " + refused.Reason
	}
	if err != nil {
		t.Fatalf("not a refusal: %v", err)
	}
	return root, ""
}

func leftIn(t *testing.T, root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, entry := range entries {
		names = append(names, entry.Name())
	}
	return names
}

func TestAWholeTarIsTakenWithItsRecordPadding(t *testing.T) {
	whole := tarOf(t, map[string]string{"a.txt": "a"})
	padded := append(append([]byte{}, whole...), make([]byte, 10240)...)
	for _, data := range [][]byte{whole, padded} {
		root, refused := extractTo(t, "tar", data)
		if refused != "" {
			t.Fatalf("refused: %s", refused)
		}
		if got, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(got) != "a" {
			t.Fatalf("a.txt holds %q", got)
		}
	}
	root, refused := extractTo(t, "tar.gz", gzipOf(t, padded))
	if refused != "" || len(leftIn(t, root)) != 1 {
		t.Fatalf("refused: %q, left %v", refused, leftIn(t, root))
	}
}

func TestATarCutBetweenEntriesIsRefused(t *testing.T) {
	whole := tarOf(t, map[string]string{"a.txt": strings.Repeat("\x00", 2048)})
	for _, cut := range []int{len(whole) - 1024, len(whole) - 512} { // without its end blocks, or one
		for _, format := range []string{"tar", "tar.gz"} {
			data := whole[:cut]
			if format == "tar.gz" {
				data = gzipOf(t, data)
			}
			root, refused := extractTo(t, format, data)
			if !strings.Contains(refused, "end-of-archive") {
				t.Fatalf("%s cut at %d: refused %q", format, cut, refused)
			}
			if left := leftIn(t, root); len(left) != 0 {
				t.Fatalf("left behind: %v", left)
			}
		}
	}
}

func TestDataAfterTheEndOfATarIsRefused(t *testing.T) {
	data := append(tarOf(t, map[string]string{"a.txt": "a"}), []byte("garbage")...)
	for _, format := range []string{"tar", "tar.gz"} {
		if format == "tar.gz" {
			data = gzipOf(t, data)
		}
		root, refused := extractTo(t, format, data)
		if !strings.Contains(refused, "after the end of the tar") || len(leftIn(t, root)) != 0 {
			t.Fatalf("%s: refused %q, left %v", format, refused, leftIn(t, root))
		}
	}
}

func TestAGzipWithoutItsTrailerOrWithAWrongCRCIsRefused(t *testing.T) {
	whole := gzipOf(t, tarOf(t, map[string]string{"a.txt": "a"}))
	badCRC := append([]byte{}, whole...)
	badCRC[len(badCRC)-8] ^= 0xff
	badLength := append([]byte{}, whole...)
	badLength[len(badLength)-1] ^= 0xff
	cases := map[string][]byte{
		"no trailer":  whole[:len(whole)-8],
		"half of it":  whole[:len(whole)-4],
		"bad crc":     badCRC,
		"bad length":  badLength,
		"garbage":     append(append([]byte{}, whole...), []byte("not gzip, not at all")...),
		"short junk":  append(append([]byte{}, whole...), 0),
		"zeros after": append(append([]byte{}, whole...), make([]byte, 512)...),
	}
	for name, data := range cases {
		root, refused := extractTo(t, "tar.gz", data)
		if refused == "" || len(leftIn(t, root)) != 0 {
			t.Fatalf("%s: refused %q, left %v", name, refused, leftIn(t, root))
		}
	}
	// Two gzip streams one after the other are one archive, as gzip has it.
	tarred := tarOf(t, map[string]string{"a.txt": "a"})
	two := append(gzipOf(t, tarred[:512]), gzipOf(t, tarred[512:])...)
	if _, refused := extractTo(t, "tar.gz", two); refused != "" {
		t.Fatalf("two members: refused %q", refused)
	}
}

func TestAZipNameWithBackslashesIsTakenAsAPath(t *testing.T) {
	zipOf := func(name string) []byte {
		var buffer bytes.Buffer
		out := zip.NewWriter(&buffer)
		file, err := out.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		file.Write([]byte("x"))
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		return buffer.Bytes()
	}
	for _, name := range []string{`..\..\x`, `a\..\..\x`, `\x`} {
		root, refused := extractTo(t, "zip", zipOf(name))
		if !strings.HasPrefix(refused, name+": ") || len(leftIn(t, root)) != 0 {
			t.Fatalf("%s: refused %q, left %v", name, refused, leftIn(t, root))
		}
	}
	root, refused := extractTo(t, "zip", append(zipOf("a.txt"), []byte("garbage")...))
	if !strings.Contains(refused, "after the end of the zip") || len(leftIn(t, root)) != 0 {
		t.Fatalf("garbage after a zip: refused %q, left %v", refused, leftIn(t, root))
	}
	var commented bytes.Buffer
	out := zip.NewWriter(&commented)
	out.SetComment("a comment")
	out.Close()
	if _, refused := extractTo(t, "zip", commented.Bytes()); refused != "" {
		t.Fatalf("a zip with a comment: refused %q", refused)
	}
	root, refused = extractTo(t, "zip", zipOf(`dir\file.txt`))
	if got, _ := os.ReadFile(filepath.Join(root, "dir", "file.txt")); refused != "" || string(got) != "x" {
		t.Fatalf("refused %q, dir/file.txt holds %q", refused, got)
	}
}

func TestUnmakeRemovesOnlyEmptyDirectoriesFromTheDeepest(t *testing.T) {
	top := filepath.Join(t.TempDir(), "a")
	made := []string{top, filepath.Join(top, "b"), filepath.Join(top, "b", "c")}
	if err := os.MkdirAll(made[2], 0o755); err != nil {
		t.Fatal(err)
	}
	unmake(made)
	if _, err := os.Lstat(top); !os.IsNotExist(err) {
		t.Fatalf("%s is still there", top)
	}
	os.MkdirAll(made[2], 0o755)
	os.WriteFile(filepath.Join(top, "other"), nil, 0o644) // put there by someone else
	unmake(made)
	if _, err := os.Lstat(filepath.Join(top, "other")); err != nil {
		t.Fatal("what another put there is gone")
	}
	if _, err := os.Lstat(made[1]); !os.IsNotExist(err) {
		t.Fatalf("%s is still there", made[1])
	}
}
