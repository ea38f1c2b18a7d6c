package main

// The ends of archives, checked: a tar reader stops at the end of its stream as if at the end
// of the archive, and a gzip reader checks its stream's CRC and length only when read to its
// end. Everything here is read to the end and checked (see extract.go).

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// endTar checks the end of a tar archive the reader has stopped at: it must have ended with
// its two blocks of zeros (the reader stops without an error at the end of the stream, so a
// tar cut between two entries would pass), and nothing but zeros (a record's padding) may
// follow them. Read to the very end, which is where a gzip stream checks its CRC and length.
func (x *extraction) endTar(stream *tarStream) error {
	if stream.ended {
		return &refusal{"(archive)", "is truncated: it ends without the end-of-archive blocks of a tar"}
	}
	room := x.maxBytes - x.bytes
	buffer := make([]byte, 32*1024)
	var padding int64
	for {
		n, err := stream.Read(buffer)
		padding += int64(n)
		for _, b := range buffer[:n] {
			if b != 0 {
				return &refusal{"(archive)", "has data after the end of the tar archive"}
			}
		}
		if padding > room {
			return &refusal{"(archive)", fmt.Sprintf("expands past the %d bytes an archive may hold", x.maxBytes)}
		}
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return &refusal{"(archive)", "is truncated"}
		}
		if err != nil {
			return err
		}
	}
}

// tarStream is what the tar reader reads: it says whether a read found the end of the
// stream. The tar reader reads exactly the blocks it needs, so it meets the end only when
// the archive lacks its end-of-archive blocks. Data that comes with the end is given without
// it, and the end said by the next read.
type tarStream struct {
	r       io.Reader
	pending error
	ended   bool
}

func (s *tarStream) Read(p []byte) (int, error) {
	if s.pending != nil {
		s.ended = true
		return 0, s.pending
	}
	n, err := s.r.Read(p)
	if err == io.EOF {
		if n > 0 {
			s.pending = err
			return n, nil
		}
		s.ended = true
	}
	return n, err
}

// gzipStream reads one gzip member after another, as gzip allows, and refuses what follows
// the last one if it is not a gzip member: a stream's CRC and length are checked when it is
// read to its end (a wrong one, or a trailer missing, is refused there).
type gzipStream struct {
	in *bufio.Reader
	z  *gzip.Reader
}

func (g *gzipStream) Read(p []byte) (int, error) {
	for {
		n, err := g.z.Read(p)
		if err != io.EOF || n > 0 {
			if err == io.EOF {
				err = nil // said by the next read
			}
			return n, gzipError(err)
		}
		if _, err := g.in.Peek(1); err == io.EOF {
			return 0, io.EOF
		}
		if err := g.z.Reset(g.in); err != nil {
			return 0, &refusal{"(archive)", "has data after the end of the gzip stream"}
		}
		g.z.Multistream(false)
	}
}

func gzipError(err error) error {
	var corrupt flate.CorruptInputError
	switch {
	case err == nil || errors.Is(err, io.ErrUnexpectedEOF):
		return err // truncated: said by the reader, naming the entry
	case errors.Is(err, gzip.ErrChecksum):
		return &refusal{"(archive)", "fails its gzip check (CRC-32 or length): it is corrupt or truncated"}
	case errors.Is(err, gzip.ErrHeader) || errors.As(err, &corrupt):
		return &refusal{"(archive)", "is not a valid gzip stream: " + err.Error()}
	}
	return err
}

// zipEnd refuses a zip followed by anything: its last record, the end of its central
// directory (22 bytes, then its comment), must end the file. (A zip reader looks for that
// record near the end and takes what follows it for granted.)
func zipEnd(file io.ReaderAt, size int64, comment string) error {
	length := int64(22 + len(comment))
	if size < length {
		return &refusal{"(archive)", "is not a zip archive"}
	}
	record := make([]byte, length)
	if _, err := file.ReadAt(record, size-length); err != nil {
		return err
	}
	said := int(record[20]) | int(record[21])<<8
	if string(record[:4]) != "PK\x05\x06" || said != len(comment) || string(record[22:]) != comment {
		return &refusal{"(archive)", "has data after the end of the zip archive"}
	}
	return nil
}
