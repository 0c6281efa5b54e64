package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzDecode holds the strict decoder to three properties: it never accepts what encoding/json
// finds invalid, its grammar refuses nothing encoding/json accepts (only the strictness rules do),
// and on what it accepts encoding/json reads the same method, id and params (TestDifferential).
func FuzzDecode(f *testing.F) {
	for _, s := range differentialCorpus {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(`[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"n"}]`), true)
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"x"}`), false)
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":"\ud83d\ude00","b":[1,2.5e-3,true,null]}}`), false)
	// Issue 29: case variants of protocol members where peers decode into structs.
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"inputRequests":{"a":{"Method":"sampling/createMessage","params":{}}}}}`), false)
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x","deſcription":"d","inputSchema":{"Name":1}}]}}`), false)
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32042,"message":"m","data":{"elicitations":[{"URL":"u"}]}}}`), false)
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"Name":"x"}}}`), false)
	f.Fuzz(func(t *testing.T, body []byte, allowBatch bool) {
		err := ValidateJSON(body, 10000)
		valid := json.Valid(body)
		switch {
		case err == nil && !valid:
			t.Fatalf("strict scan accepts what encoding/json refuses: %q", body)
		case err == nil && !utf8.Valid(body):
			t.Fatalf("strict scan accepts invalid UTF-8: %q", body)
		case errors.Is(err, ErrSyntax) && valid:
			t.Fatalf("grammar differs from encoding/json on %q: %v", body, err)
		}

		msgs, batch, derr := Decode(body, DecodeOptions{AllowBatch: allowBatch})
		if derr != nil {
			if msgs != nil {
				t.Fatalf("messages with an error")
			}
			return
		}
		if !valid || err != nil {
			t.Fatalf("Decode accepts what the scan refuses (%v): %q", err, body)
		}
		if batch != (len(bytes.TrimLeft(body, " \t\r\n")) > 0 && bytes.TrimLeft(body, " \t\r\n")[0] == '[') {
			t.Fatalf("batch = %v for %q", batch, body)
		}
		if batch && !allowBatch {
			t.Fatalf("batch accepted without AllowBatch")
		}
		for _, m := range msgs {
			// Each message stands alone and decodes to the same thing.
			again, err := DecodeMessage(m.Raw, DecodeOptions{})
			if err != nil {
				t.Fatalf("message %q of an accepted body refused alone: %v", m.Raw, err)
			}
			if !reflect.DeepEqual(again, m) {
				t.Fatalf("message decodes differently alone: %+v vs %+v", again, m)
			}
			checkDifferential(t, m.Raw)
			_ = m.Name()
			if m.Kind == KindRequest || m.Kind == KindNotification {
				// The scan's shortcut (a params walk only when it saw a lone case variant of a
				// protocol member) misses nothing the walk refuses.
				if err := checkTyped(m.Params, 0, paramsType(m.Method)); err != nil {
					t.Fatalf("accepted params the walk refuses: %v", err)
				}
			}
			if len(m.Params) > 0 && m.Params[0] == '{' {
				// The policy view of params equals encoding/json's reading of the same bytes.
				if got, want := DecodeValue(m.Params), referenceDecode(t, m.Params); !reflect.DeepEqual(got, want) {
					t.Fatalf("params view differs from encoding/json:\n got %#v\nwant %#v", got, want)
				}
			}
			if len(m.Params) > 0 && m.Params[0] == '{' {
				// The scan's index of params agrees with a walk over them, key by key.
				for _, k := range paramKeys {
					got, gok := m.Param(k)
					want, wok := Member(m.Params, k)
					if gok != wok || !bytes.Equal(got, want) {
						t.Fatalf("param(%q) = %q, %v; a walk finds %q, %v in %q", k, got, gok, want, wok, m.Params)
					}
				}
			}
			_ = m.Arguments()
			_ = m.Meta()
			_ = m.ClientInfo()
			_ = m.ProtocolVersion()
			_ = m.IDText()
			if m.Kind == KindRequest {
				out := EncodeError(m.ID, -31001, "denied", map[string]any{"x": m.Method})
				e, err := DecodeMessage(out, DecodeOptions{})
				if err != nil || !bytes.Equal(e.ID, m.ID) {
					t.Fatalf("EncodeError(%s) = %q does not decode to the same id: %v", m.ID, out, err)
				}
			}
		}
	})
}

// referenceDecode is encoding/json's reading of a validated value, numbers converted as
// DecodeValue converts them.
func referenceDecode(t *testing.T, v []byte) any {
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		t.Fatalf("encoding/json refuses %q: %v", v, err)
	}
	var conv func(any) any
	conv = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = conv(e)
			}
		case []any:
			for i, e := range x {
				x[i] = conv(e)
			}
		case json.Number:
			return number([]byte(x))
		}
		return v
	}
	return conv(out)
}
