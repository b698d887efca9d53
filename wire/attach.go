package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// AttachProtocol is the Upgrade token of an attached exec: POST
// /v1/workspaces/{id}/attach with "Connection: Upgrade" and "Upgrade:
// layerfs-attach/1", the ExecRequest as its JSON body. Once the daemon
// answers 101 Switching Protocols, the connection carries frames both
// ways until the exec ends. A request the daemon refuses before the
// command starts gets an ordinary JSON error instead of the 101.
const AttachProtocol = "layerfs-attach/1"

// Frame types of an attached exec. A frame is its type (one byte), its
// payload's length (four bytes, big-endian, at most MaxFramePayload) and
// the payload.
const (
	// From the client.
	FrameStdin    byte = 'i' // input for the command
	FrameStdinEnd byte = 'c' // the end of its input (on a terminal: hang up)
	FrameResize   byte = 'r' // a terminal's new size: a TerminalSize as JSON
	// From the daemon.
	FrameStdout byte = 'o' // output (all of a terminal's)
	FrameStderr byte = 'e' // error output
	FrameEnd    byte = 'x' // the last frame: an ExecEvent (its Result, or its Error) as JSON
)

// MaxFramePayload bounds a frame's payload.
const MaxFramePayload = 1 << 20

// ErrFrame is wrapped by ReadFrame for a frame that breaks the format.
var ErrFrame = errors.New("malformed attach frame")

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxFramePayload {
		return fmt.Errorf("%w: %d bytes of payload, more than %d", ErrFrame, len(payload), MaxFramePayload)
	}
	b := make([]byte, 5+len(payload))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:5], uint32(len(payload)))
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// ReadFrame reads one frame; io.EOF only when the stream ends between
// frames.
func ReadFrame(r io.Reader) (typ byte, payload []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("%w: cut in its header", ErrFrame)
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxFramePayload {
		return 0, nil, fmt.Errorf("%w: %d bytes of payload, more than %d", ErrFrame, n, MaxFramePayload)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("%w: cut in its payload: %w", ErrFrame, err)
	}
	return h[0], payload, nil
}
