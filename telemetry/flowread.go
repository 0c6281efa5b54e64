package telemetry

import (
	"bufio"
	"bytes"
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
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxRecordLine)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if b[0] != '{' {
			return fmt.Errorf("line %d: not a flow log record (a JSON object)", line)
		}
		var rec FlowRecord
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&rec); err != nil {
			return fmt.Errorf("line %d: %v", line, err)
		}
		if dec.More() {
			return fmt.Errorf("line %d: more than one JSON value", line)
		}
		if err := fn(line, &rec); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("a line longer than %d bytes", MaxRecordLine)
		}
		return err
	}
	return nil
}
