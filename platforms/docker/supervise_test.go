package docker

import "testing"

func TestTrailerRoundTrip(t *testing.T) {
	want := trailer{Exit: 137, Signal: 9, Flags: flagTimedOut, Command: 1234567}
	got, err := decodeTrailer(encodeTrailer(want))
	if err != nil || got != want {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", want, got, err)
	}
}
