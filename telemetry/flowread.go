package telemetry

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxRecordLine bounds one line of a flow log read back: a record is a few hundred bytes, its
// longest fields (reason, path) bounded by the appliance.
const MaxRecordLine = 1 << 20

// ReadFlowRecords calls fn with each JSON object line of r (blank lines skipped), numbered from
// 1: a flow log as the appliance writes it, read back (`policy test`). A line that is not a flow
// log record (not a JSON object, a key of the wrong type, longer than MaxRecordLine) is an error
// naming the line.
func ReadFlowRecords(r io.Reader, fn func(line int, rec *FlowRecord) error) error {
	return ScanFlowRecords(r, func(line int, _ []byte, rec *FlowRecord, err error) error {
		if err != nil {
			return err
		}
		return fn(line, rec)
	})
}

// ScanFlowRecords calls fn with each non-blank line of r, numbered from 1: the line as read (valid
// until fn returns; without its newline), and the record it holds or, for a line that is not a
// flow log record, nil and an error naming the line. fn decides: an error it returns ends the
// scan with that error, so a reader that counts bad lines returns nil for them. A line longer than
// MaxRecordLine is passed (as an error, without its bytes) and skipped. A final line without its
// newline (a log being written) is read as any other. Errors reading r end the scan.
func ScanFlowRecords(r io.Reader, fn func(line int, raw []byte, rec *FlowRecord, err error) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for line := 1; ; line++ {
		b, tooLong, err := readLine(br, &long)
		if err == io.EOF && b == nil && !tooLong {
			return nil
		}
		if err != nil && err != io.EOF {
			return err
		}
		var ferr error
		switch {
		case tooLong:
			ferr = fn(line, nil, nil, fmt.Errorf("line %d: longer than %d bytes", line, MaxRecordLine))
		default:
			t := bytes.TrimSpace(b)
			if len(t) == 0 {
				break
			}
			rec, perr := parseRecordLine(t)
			if perr != nil {
				ferr = fn(line, t, nil, fmt.Errorf("line %d: %v", line, perr))
			} else {
				ferr = fn(line, t, rec, nil)
			}
		}
		if ferr != nil {
			return ferr
		}
		if err == io.EOF {
			return nil
		}
	}
}

// readLine is the next line of br without its newline; tooLong when it passed MaxRecordLine (its
// bytes are then skipped up to the newline). err is io.EOF at the end (with the final line, if
// it lacked a newline).
func readLine(br *bufio.Reader, buf *[]byte) (line []byte, tooLong bool, err error) {
	*buf = (*buf)[:0]
	for {
		frag, err := br.ReadSlice('\n')
		if !tooLong {
			if len(*buf)+len(frag) > MaxRecordLine+1 {
				tooLong = true
				*buf = (*buf)[:0]
			} else {
				*buf = append(*buf, frag...)
			}
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil:
			if tooLong {
				return nil, true, nil
			}
			return bytes.TrimSuffix(*buf, []byte("\n")), false, nil
		default:
			if tooLong {
				return nil, true, err
			}
			if len(*buf) == 0 {
				return nil, false, err
			}
			return *buf, false, err
		}
	}
}

func parseRecordLine(b []byte) (*FlowRecord, error) {
	if b[0] != '{' {
		return nil, errors.New("not a flow log record (a JSON object)")
	}
	var rec FlowRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&rec); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return &rec, nil
}

// OpenFlowLog wraps r, a flow log file's contents, decompressing it when it is gzip (as
// logrotate's compress leaves the archives: FILE-DATE.gz), whatever its name.
func OpenFlowLog(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(2)
	if err != nil || magic[0] != 0x1f || magic[1] != 0x8b {
		return br, nil // too short for gzip, or plain text
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("gzip: %v", err)
	}
	return zr, nil
}
