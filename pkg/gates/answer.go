package gates

import (
	"encoding/json"
	"fmt"
	"io"
)

// maxAnswerBody bounds the answer read from Prometheus (a gate's, the
// alert gate's included); a cluster in trouble can have many alerts, but
// not this many bytes of them.
const maxAnswerBody = 16 << 20

// cappedReader reads at most left bytes of r, and says when r had more.
type cappedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a body of exactly the bound from a longer one.
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			c.over = true
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// decodeAnswer reads a Prometheus API answer as a stream:
// {"status": ..., "error": ..., "data": ...}, keys in any order, other keys
// skipped; data reads the value of "data". An answer whose status is not
// success is an error that quotes Prometheus's.
func decodeAnswer(r io.Reader, data func(*json.Decoder) error) error {
	dec := json.NewDecoder(r)
	bad := func(err error) error { return fmt.Errorf("not a Prometheus API answer: %w", err) }
	var status, apiErr string
	if err := expectDelim(dec, '{'); err != nil {
		return bad(err)
	}
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return bad(err)
		}
		switch key {
		case "status":
			err = dec.Decode(&status)
		case "error":
			err = dec.Decode(&apiErr)
		case "data":
			err = data(dec)
		default:
			err = dec.Decode(&json.RawMessage{})
		}
		if err != nil {
			return bad(err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return bad(err)
	}
	if status != "success" {
		if apiErr != "" {
			return fmt.Errorf("status %q: %s", status, apiErr)
		}
		return fmt.Errorf("status %q, want \"success\"", status)
	}
	return nil
}

// openOrNull reads the opening delimiter want, or a null in its place
// (reported true).
func openOrNull(dec *json.Decoder, want json.Delim) (null bool, err error) {
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	if tok == nil {
		return true, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return false, fmt.Errorf("found %v where %q was expected", tok, string(want))
	}
	return false, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("found %v where %q was expected", tok, string(want))
	}
	return nil
}

func objectKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	key, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("found %v where an object key was expected", tok)
	}
	return key, nil
}
