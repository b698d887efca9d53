package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	for _, f := range []struct {
		typ  byte
		data string
	}{{FrameStdin, "hello"}, {FrameStdinEnd, ""}, {FrameResize, `{"rows":1,"cols":2}`}} {
		if err := WriteFrame(&b, f.typ, []byte(f.data)); err != nil {
			t.Fatal(err)
		}
	}
	want := "i\x00\x00\x00\x05helloc\x00\x00\x00\x00r\x00\x00\x00\x13{\"rows\":1,\"cols\":2}"
	if b.String() != want {
		t.Fatalf("encoded %q, want %q", b.String(), want)
	}
	for _, wantTyp := range []byte{FrameStdin, FrameStdinEnd, FrameResize} {
		typ, _, err := ReadFrame(&b)
		if err != nil || typ != wantTyp {
			t.Fatalf("ReadFrame = %q, %v; want %q", typ, err, wantTyp)
		}
	}
	if _, _, err := ReadFrame(&b); err != io.EOF {
		t.Errorf("at the end: %v, want io.EOF", err)
	}
	for _, bad := range []string{"i\x00\x00", "i\x00\x00\x00\x05hel", "i\xff\xff\xff\xff"} {
		if _, _, err := ReadFrame(bytes.NewReader([]byte(bad))); !errors.Is(err, ErrFrame) {
			t.Errorf("ReadFrame(%q) = %v, want ErrFrame", bad, err)
		}
	}
	if err := WriteFrame(io.Discard, FrameStdin, make([]byte, MaxFramePayload+1)); !errors.Is(err, ErrFrame) {
		t.Errorf("a payload too large: %v, want ErrFrame", err)
	}
}
